/*
 * scrape.c — reading the server's memory: Prometheus text from GET /metrics, and VmRSS / CPU time
 * from /proc/PID when the server's pid is known.
 */
#include "load.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Prometheus exposition: "name{labels} value [timestamp]" or "name value"; '#' lines are comments.
 * The name must match exactly (so recurd_state_bytes does not match recurd_state_bytes_total). */
double lg_prom_value(const char *text, const char *name)
{
    size_t nl = strlen(name);
    const char *p = text;
    while (p && *p) {
        const char *eol = strchr(p, '\n');
        if (*p != '#' && strncmp(p, name, nl) == 0 && (p[nl] == ' ' || p[nl] == '{' || p[nl] == '\t')) {
            const char *v = p + nl;
            if (*v == '{') {
                v = strchr(v, '}');
                if (!v || (eol && v > eol))
                    return -1;
                v++;
            }
            while (*v == ' ' || *v == '\t')
                v++;
            char *end = NULL;
            double x = strtod(v, &end);
            if (end != v)
                return x;
            return -1;
        }
        p = eol ? eol + 1 : NULL;
    }
    return -1;
}

/* /proc/PID/NAME, read whole into buf (NUL-terminated, cut at cap - 1 bytes); 0, or -1 when there
 * is no pid or no such file. */
static int read_proc(int pid, const char *name, char *buf, size_t cap)
{
    if (pid <= 0)
        return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", pid, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return 0;
}

double lg_proc_rss(int pid)
{
    char buf[8192];
    if (read_proc(pid, "status", buf, sizeof buf))
        return -1;
    const char *v = strstr(buf, "\nVmRSS:"); /* never the first line (Name: is) */
    return v ? strtod(v + 7, NULL) * 1024.0 : -1; /* kB */
}

double lg_proc_cpu(int pid)
{
    char buf[1024];
    if (read_proc(pid, "stat", buf, sizeof buf))
        return -1;
    /* The command name may contain spaces: fields are counted after the last ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    p++;
    unsigned long long utime = 0, stime = 0;
    /* after ')': state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15) */
    int field = 2;
    char *tok = strtok(p, " ");
    while (tok) {
        field++;
        if (field == 14)
            utime = strtoull(tok, NULL, 10);
        else if (field == 15) {
            stime = strtoull(tok, NULL, 10);
            break;
        }
        tok = strtok(NULL, " ");
    }
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0)
        hz = 100;
    return (double)(utime + stime) / (double)hz;
}
