/* The torture runner's reports: one block per scenario, and the table of
 * docs/safety.md ("Fault testing"). */
#include <stdio.h>
#include <string.h>

#include "torture.h"

static void errors_text(const ck_torture *t, char *buf, size_t len, int max)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < t->nerrors && n < len; i++) {
        if (i == max) {
            snprintf(buf + n, len - n, ", ...");
            return;
        }
        int w = snprintf(buf + n, len - n, "%s%s %ld", i ? ", " : "", t->errors[i].name,
                         t->errors[i].n);
        if (w < 0)
            return;
        n += (size_t)w;
    }
    if (!t->nerrors)
        snprintf(buf, len, "none");
}

static long errors_total(const ck_torture *t)
{
    long n = 0;
    for (int i = 0; i < t->nerrors; i++)
        n += t->errors[i].n;
    return n;
}

void report_scenario(FILE *f, const scenario *sc, const outcome *o)
{
    fprintf(f, "   faults: %s\n", sc->faults);
    if (!o->ran) {
        fprintf(f, "   %s\n", o->verdict);
        return;
    }
    const ck_torture *t = &o->t;
    fprintf(f, "   %.1f s wall; %ld sections completed, %ld ended otherwise (died, killed, lock "
               "lost under relock run)\n",
            o->wall_s, t->sections, t->ended_otherwise);
    for (int k = 0; k < t->base.nkinds; k++) {
        const ck_kind *kk = &t->base.kinds[k];
        fprintf(f, "     %-12s %5ld sections, %d processes, %ld overran their lease, %ld releases "
                   "LOST (%ld with validity left), %ld ambiguous\n",
                kk->name, kk->sections, kk->pids, kk->overruns, kk->lost_valid + kk->lost_expired,
                kk->lost_valid, kk->ambiguous);
    }
    fprintf(f, "   overlaps within leases: %ld (the resource refused the older holder's later "
               "access %ld, accepted it %ld, not touched %ld)\n",
            t->overlaps, t->ov_caught, t->ov_accepted, t->ov_quiet);
    fprintf(f, "   overlaps with a holder past its lease: %ld (the resource refused its later "
               "access %ld, accepted it %ld, not touched %ld)\n",
            t->overlaps_past, t->past_caught, t->past_accepted, t->past_quiet);
    fprintf(f, "   resource: %ld operations, %ld refused; stale accesses: %ld accepted, %ld "
               "refused, %ld without a token to judge; %ld refused within the lease (token "
               "behind); lost updates %ld (value %lld after %ld accepted writes)%s\n",
            t->ops, t->refused, t->stale_accepted, t->stale_refused, t->stale_tokenless,
            t->refused_current, t->lost_updates, t->final_value, t->writes_accepted,
            t->ops_unmatched ? "; SOME OPERATIONS OUTSIDE ANY SECTION" : "");
    fprintf(f, "   takeovers: %ld of dead holders, %ld of holders past their lease\n",
            t->takeovers_dead, t->takeovers_past);
    fprintf(f, "   faults applied: %ld kills (%ld while holding), %ld stops, %ld server "
               "restarts, %ld proxy settings\n",
            t->kills, t->kills_holding, t->pauses, t->restarts, t->proxy_changes);
    char err[512];
    errors_text(t, err, sizeof err, 12);
    fprintf(f, "   errors by status: %s\n", err);
    char log[320];
    snprintf(log, sizeof log, "%s/sections.log", o->dir);
    if (t->overlaps) {
        fprintf(f, "   first overlap within leases: %s\n", t->ov_desc);
        ck_print_lines(f, log, t->ov_lo > 3 ? t->ov_lo - 3 : 1, t->ov_hi + 3, 30);
    }
    if (t->stale_accepted) {
        fprintf(f, "   first stale access accepted: %s\n", t->st_desc);
        ck_print_lines(f, log, t->st_lo > 3 ? t->st_lo - 3 : 1, t->st_hi + 3, 30);
    }
    fprintf(f, "   target: %s\n", o->verdict);
}

static const char *result_word(const scenario *sc, const outcome *o)
{
    if (!o->ran)
        return "not run";
    if (sc->target == T_INFO)
        return o->met ? "reported" : "FAILED";
    return o->met ? "met" : "MISSED";
}

static const char *target_text(const scenario *sc)
{
    switch (sc->target) {
    case T_SAFE:
        return "0 overlaps, 0 stale accepted";
    case T_NO_OVERLAP:
        return "0 overlaps";
    case T_OVERLAPS:
        return "overlaps (negative control)";
    case T_INFO:
        return "informational";
    }
    return "?";
}

void report_table(FILE *f, const scenario *const *sc, const outcome *o, int n, int markdown)
{
    if (markdown) {
        fprintf(f, "| scenario | time | sections | overlaps: fence refused / accepted / no "
                   "access | past-lease overlaps: refused / accepted / no access | stale "
                   "writes accepted | stale writes refused | stale, no token | lost updates | "
                   "takeovers: dead / past lease | kills / stops / restarts / proxy settings | "
                   "errors by status | target | result |\n");
        fprintf(f, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|---|\n");
    } else {
        fprintf(f, "%-30s %5s %8s %18s %18s %6s %6s %6s %9s %7s  %s\n", "scenario", "time",
                "sections", "overlaps (r/a/-)", "past (r/a/-)", "stale+", "stale-", "lost",
                "takeovers", "errors", "target");
    }
    for (int i = 0; i < n; i++) {
        const ck_torture *t = &o[i].t;
        char name[64];
        snprintf(name, sizeof name, "%s %s", sc[i]->id, sc[i]->title);
        if (!o[i].ran) {
            if (markdown)
                fprintf(f, "| %s | | | | | | | | | | | %s | %s | not run |\n", name,
                        o[i].infra, target_text(sc[i]));
            else
                fprintf(f, "%-30s not run: %s\n", name, o[i].infra);
            continue;
        }
        char ov[48], past[48], tk[32];
        snprintf(ov, sizeof ov, "%ld (%ld/%ld/%ld)", t->overlaps, t->ov_caught, t->ov_accepted,
                 t->ov_quiet);
        snprintf(past, sizeof past, "%ld (%ld/%ld/%ld)", t->overlaps_past, t->past_caught,
                 t->past_accepted, t->past_quiet);
        snprintf(tk, sizeof tk, "%ld/%ld", t->takeovers_dead, t->takeovers_past);
        if (markdown) {
            char err[512];
            errors_text(t, err, sizeof err, 6);
            fprintf(f,
                    "| %s | %.0f s | %ld | %ld: %ld / %ld / %ld | %ld: %ld / %ld / %ld | %ld | "
                    "%ld | %ld | %ld | %ld / %ld | %ld / %ld / %ld / %ld | %s | %s | %s |\n",
                    name, o[i].duration_s, t->sections, t->overlaps, t->ov_caught,
                    t->ov_accepted, t->ov_quiet, t->overlaps_past, t->past_caught,
                    t->past_accepted, t->past_quiet, t->stale_accepted, t->stale_refused,
                    t->stale_tokenless, t->lost_updates, t->takeovers_dead, t->takeovers_past,
                    t->kills, t->pauses, t->restarts, t->proxy_changes, err,
                    target_text(sc[i]), result_word(sc[i], &o[i]));
        } else {
            fprintf(f, "%-30s %4.0fs %8ld %18s %18s %6ld %6ld %6ld %9s %7ld  %s: %s\n", name,
                    o[i].duration_s, t->sections, ov, past, t->stale_accepted, t->stale_refused,
                    t->lost_updates, tk, errors_total(t), target_text(sc[i]),
                    result_word(sc[i], &o[i]));
        }
    }
    if (!markdown)
        fprintf(f, "(overlaps: both holders within their leases; past: one holder past its "
                   "lease; r/a/-: the resource refused / accepted / was not touched by the "
                   "older holder after the newer one; stale+/-: stale writes accepted / "
                   "refused; lost: lost updates; takeovers: of dead holders / of holders past "
                   "their lease)\n");
}
