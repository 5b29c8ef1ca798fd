/* test_access_log.c — the access log's line (server/access_log.c): every field as the record
 * says, nothing that would need escaping ever copied, durations from integer nanoseconds; and the
 * writer: every buffered line written by close, failed writes counted as dropped lines. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "access_log.h"

static srv_access record(srv_access_note *note)
{
    memset(note, 0, sizeof *note);
    note->route = "/v1/sessions/{id}/?";
    snprintf(note->session, sizeof note->session, "0123456789ab");
    note->tokens_in = 3;
    note->tokens_out = 40;
    srv_access a = {.method = "POST", .status = 422, .error = "max_context", .bytes_in = 200,
                    .bytes_out = 600, .t_start_ns = 1000, .t_first_ns = 1000 + 488000,
                    .t_end_ns = 1000 + 1234567890, .seq = 17, .remote = "127.0.0.1:40000",
                    .note = note};
    return a;
}

Test(access_log, line_fields)
{
    srv_access_note note;
    srv_access a = record(&note);
    char line[1024];
    size_t n = srv_access_log_format(&a, "abcdef01", line, sizeof line);
    cr_assert(n > 0 && line[n - 1] == '\n');
    line[n] = '\0';
    const char *want[] = {
        "\"level\":\"info\",\"event\":\"access\",\"request_id\":\"abcdef01-17\"",
        "\"remote\":\"127.0.0.1:40000\"", "\"method\":\"POST\"",
        "\"route\":\"/v1/sessions/{id}\"", /* routes.c's optional-slash marker dropped */
        "\"status\":422", "\"bytes_in\":200", "\"bytes_out\":600",
        "\"duration_s\":1.234568", /* rounded to the microsecond */
        "\"ttfb_s\":0.000488", "\"tokens_in\":3", "\"tokens_out\":40",
        "\"session\":\"0123456789ab\"", "\"error\":\"max_context\"", "\"aborted\":false}\n"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(strstr(line, want[i]), "%s not in %s", want[i], line);
    cr_assert(!strncmp(line, "{\"ts\":\"20", 9), "%s", line);
}

Test(access_log, absent_and_unsafe_values_are_null)
{
    srv_access_note note;
    srv_access a = record(&note);
    note.route = NULL;
    note.session[0] = '\0';
    a.t_first_ns = 0;
    a.error = "bad\"code";     /* never copied when it would need escaping */
    a.request_id = "ok-id.1:2"; /* the client's id, already validated by the HTTP layer */
    a.aborted = 1;
    char line[1024];
    size_t n = srv_access_log_format(&a, "abcdef01", line, sizeof line);
    cr_assert(n > 0);
    line[n] = '\0';
    const char *want[] = {"\"request_id\":\"ok-id.1:2\"", "\"route\":null", "\"ttfb_s\":null",
                          "\"session\":null", "\"error\":null", "\"aborted\":true}"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_assert(strstr(line, want[i]), "%s not in %s", want[i], line);
    cr_assert_eq(srv_access_log_format(&a, "abcdef01", line, 100), 0, "a line that does not fit");
}

Test(access_log, session_hash_is_short_and_stable)
{
    char a[13], b[13], c[13];
    srv_access_session_hash("0123456789abcdef0123456789abcdef", a);
    srv_access_session_hash("0123456789abcdef0123456789abcdef", b);
    srv_access_session_hash("0123456789abcdef0123456789abcdee", c);
    cr_assert_eq(strlen(a), 12);
    cr_assert_str_eq(a, b);
    cr_assert_str_neq(a, c);
    cr_assert(!strstr("0123456789abcdef0123456789abcdef", a), "the hash is not a piece of the id");
}

Test(access_log, close_writes_every_buffered_line)
{
    char path[] = "/tmp/recurd_access_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    srv_access_log *l;
    char err[256];
    cr_assert_eq(srv_access_log_open(path, 1 << 16, &l, err, sizeof err), 0, "%s", err);
    srv_access_note note;
    srv_access a = record(&note);
    for (int i = 0; i < 100; i++)
        srv_access_log_record(l, &a);
    srv_access_log_stats s = srv_access_log_get_stats(l);
    cr_assert_eq(s.lines, 100);
    srv_access_log_close(l); /* before its flush interval: close writes them */
    FILE *f = fopen(path, "r");
    int lines = 0, ch;
    while ((ch = fgetc(f)) != EOF)
        lines += ch == '\n';
    fclose(f);
    unlink(path);
    cr_assert_eq(lines, 100);
}

Test(access_log, failed_writes_are_dropped_lines)
{
    srv_access_log *l;
    char err[256];
    cr_assert_eq(srv_access_log_open("/dev/full", 4096, &l, err, sizeof err), 0, "%s", err);
    srv_access_note note;
    srv_access a = record(&note);
    for (int i = 0; i < 40; i++) /* ~350 bytes a line: the 4 KiB buffer takes ~11 */
        srv_access_log_record(l, &a);
    srv_access_log_stats s = srv_access_log_get_stats(l);
    cr_assert(s.lines > 0 && s.lines < 40, "lines %llu", (unsigned long long)s.lines);
    /* the lines refused by the full buffer, then (once the writer has tried) the buffered ones
     * whose write failed: every line is accounted as lost */
    for (int i = 0; i < 500 && srv_access_log_get_stats(l).dropped < 40; i++)
        usleep(10000);
    s = srv_access_log_get_stats(l);
    cr_assert_eq(s.dropped, 40, "dropped %llu", (unsigned long long)s.dropped);
    cr_assert(s.write_errors >= 1);
    srv_access_log_close(l);
}
