/*
 * main.c — recurd: flags and config, the model, the session table, the scheduler, the HTTP
 * server, signals. One libuv loop thread owns every socket and the session table; the model
 * runs on the scheduler's worker threads.
 *
 * Shutdown: the first SIGTERM/SIGINT stops accepting and lets in-flight streams finish; after
 * drain_timeout_ms running generations end with reason "cancelled"; a few seconds later any
 * connection still open is closed. Then the workers are joined and the process exits 0.
 * A second SIGTERM/SIGINT exits at once.
 */
#include <arpa/inet.h>
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "access_log.h"
#include "app.h"
#include "text.h"
#include "openai.h"
#include "auth.h"
#include "hostaddr.h"
#include "log.h"
#include "metrics.h"
#include "prefix_cache.h"
#include "redis_tier.h"
#include "residency.h"
#include "sd_notify.h"
#include "state_blob.h"

#define HARD_CLOSE_GRACE_MS 3000

static srv_app g_app;
static uv_signal_t g_sigterm, g_sigint, g_sighup;
static uv_timer_t g_drain_timer, g_close_timer;
static int g_signals;

static char *read_file(const char *path, size_t max)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    fclose(f);
    if (!buf || n > max) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static void on_ttl(uv_timer_t *t)
{
    srv_ops_expire_idle(&g_app);
}

static void close_cb_noop(uv_handle_t *h) {}

static void on_drained(srv_server *s, void *appv)
{
    srv_app *app = appv;
    srv_log(SRV_LOG_INFO, "drained", "\"sessions\":%zu", srv_table_count(app->table));
    uv_timer_stop(&app->ttl_timer);
    uv_close((uv_handle_t *)&app->ttl_timer, close_cb_noop);
    uv_close((uv_handle_t *)&g_drain_timer, close_cb_noop);
    uv_close((uv_handle_t *)&g_close_timer, close_cb_noop);
    uv_close((uv_handle_t *)&g_sigterm, close_cb_noop);
    uv_close((uv_handle_t *)&g_sigint, close_cb_noop);
    uv_close((uv_handle_t *)&g_sighup, close_cb_noop);
    srv_sched_stop(app->sched);
    srv_residency_shutdown(app); /* workers joined: write every changed session */
    srv_tier_shutdown(app);      /* and commit every changed one to Redis */
    srv_pcache_shutdown(app->pcache); /* and every prefix-cache entry not on disk yet */
}

/* The prefix cache (prefix_cache.h), spilling to state_dir/prefix_cache when state_dir is set
 * (srv_residency_start made state_dir). 0, or -1 after logging why. */
static int start_prefix_cache(srv_app *app)
{
    char dir[SRV_PATH_MAX + 32] = "", err[600];
    if (app->cfg.state_dir[0])
        snprintf(dir, sizeof dir, "%s/prefix_cache", app->cfg.state_dir);
    srv_pcache_config pcfg = {app->cfg.prefix_cache_bytes, app->cfg.prefix_cache_disk_bytes,
                              app->cfg.prefix_checkpoint_interval, dir};
    if (srv_pcache_create(&pcfg, app->model, app->loop, &app->pcache, err, sizeof err) != 0) {
        char e[1400];
        srv_log(SRV_LOG_ERROR, "prefix_cache_dir_unusable", "\"message\":\"%s; refusing to start\"",
                srv_log_str(err, e, sizeof e));
        return -1;
    }
    return 0;
}

static void on_close_timer(uv_timer_t *t)
{
    srv_log(SRV_LOG_WARN, "drain_forced_close", NULL);
    srv_server_close_all(g_app.server);
}

static void on_drain_timer(uv_timer_t *t)
{
    srv_log(SRV_LOG_WARN, "drain_timeout", "\"drain_timeout_ms\":%llu",
            (unsigned long long)g_app.cfg.drain_timeout_ms);
    srv_ops_cancel_all(&g_app);
    uv_timer_start(&g_close_timer, on_close_timer, HARD_CLOSE_GRACE_MS, 0);
}

static void on_signal(uv_signal_t *h, int signum)
{
    if (++g_signals > 1) {
        srv_log(SRV_LOG_WARN, "exit_now", "\"signal\":%d", signum);
        _exit(128 + signum);
    }
    srv_log(SRV_LOG_INFO, "draining", "\"signal\":%d,\"drain_timeout_ms\":%llu", signum,
            (unsigned long long)g_app.cfg.drain_timeout_ms);
    g_app.draining = 1;
    srv_sd_notify("STOPPING=1");
    uv_timer_start(&g_drain_timer, on_drain_timer, g_app.cfg.drain_timeout_ms, 0);
    srv_server_drain(g_app.server, on_drained);
}

/* SIGHUP: reopen the access log (logrotate); nothing else is reloaded. */
static void on_sighup(uv_signal_t *h, int signum)
{
    srv_access_log_reopen(g_app.access_log);
}

/* The access log (access_log.h): "-" writes to stderr only at log_level info or debug. 0, or
 * -1 after logging why (an unusable path refuses to start). */
static int start_access_log(srv_app *app)
{
    const char *path = app->cfg.access_log;
    if (!path[0] || (!strcmp(path, "-") && !srv_log_enabled(SRV_LOG_INFO)))
        return 0;
    char err[1200], e[1400];
    if (srv_access_log_open(path, app->cfg.access_log_buffer_bytes, &app->access_log, err,
                            sizeof err) != 0) {
        srv_log(SRV_LOG_ERROR, "access_log_unusable", "\"message\":\"%s; refusing to start\"",
                srv_log_str(err, e, sizeof e));
        return -1;
    }
    return 0;
}

/* What the quantized-weights cache did at load (recur_model_quantize_cached): a hit or a write at
 * info, a refused file (with its rule) or a file not written at warn. */
static void log_weights_cache(const recur_wcache_report *wc)
{
    if (wc->outcome == RECUR_WCACHE_OFF) return;
    char p[1100], d[300];
    srv_log_str(wc->path, p, sizeof p);
    srv_log_str(wc->detail, d, sizeof d);
    if (wc->rule[0]) /* the file found there was refused, never used */
        srv_log(SRV_LOG_WARN, "weights_cache_refused", "\"path\":\"%s\",\"rule\":\"%s\",\"detail\":\"%s\"", p,
                wc->rule, wc->outcome == RECUR_WCACHE_REPLACED ? d : "");
    if (wc->outcome == RECUR_WCACHE_NOT_WRITTEN)
        srv_log(SRV_LOG_WARN, "weights_cache_not_written", "\"path\":\"%s\",\"detail\":\"%s\"", p, d);
    else
        srv_log(SRV_LOG_INFO, "weights_cache", "\"outcome\":\"%s\",\"path\":\"%s\"",
                recur_wcache_outcome_name(wc->outcome), p);
}

static int load_model(srv_app *app)
{
    int rc;
    char load_err[512] = ""; /* what recur_model_load_ex names (file, config key, tensor) */
    if (app->cfg.model_config[0]) {
        char *json = read_file(app->cfg.model_config, 1 << 20);
        if (!json) {
            char p[512];
            srv_log(SRV_LOG_ERROR, "model_config_unreadable", "\"path\":\"%s\"",
                    srv_log_str(app->cfg.model_config, p, sizeof p));
            return -1;
        }
        rc = recur_model_init_seed(json, app->cfg.model_seed, &app->model);
        free(json);
    } else {
        rc = recur_model_load_ex(app->cfg.model, &app->model, load_err, sizeof load_err);
    }
    if (rc != 0) {
        char p[512], e[1024];
        srv_log(SRV_LOG_ERROR, "model_load_failed", "\"path\":\"%s\",\"error\":\"%s\",\"detail\":\"%s\"",
                srv_log_str(app->cfg.model_config[0] ? app->cfg.model_config : app->cfg.model, p,
                            sizeof p),
                recur_strerror(rc), srv_log_str(load_err[0] ? load_err : recur_strerror(rc), e, sizeof e));
        return -1;
    }
    if (strcasecmp(app->cfg.weights_dtype, "auto")) {
        recur_model *q = NULL;
        recur_wcache_report wc;
        rc = recur_model_quantize_cached(app->model, app->cfg.weights_dtype, app->cfg.weights_cache,
                                         app->cfg.weights_cache_max_bytes, &q, &wc, load_err, sizeof load_err);
        recur_model_free(app->model);
        app->model = q;
        if (rc != 0) {
            char e[1024];
            srv_log(SRV_LOG_ERROR, "model_quantize_failed", "\"weights_dtype\":\"%s\",\"error\":\"%s\"",
                    app->cfg.weights_dtype, srv_log_str(load_err[0] ? load_err : recur_strerror(rc), e, sizeof e));
            return -1;
        }
        log_weights_cache(&wc);
    }
    recur_state_dtype sdt = RECUR_STATE_F32;
    recur_state_dtype_parse(app->cfg.state_dtype, &sdt); /* checked with the config */
    recur_model_set_state_dtype(app->model, sdt);        /* before any state or workspace */
    /* the CPU's check happens here, not with the config: a bf16 prefill refused by name */
    if ((rc = recur_model_set_prefill_dtype(app->model, app->cfg.prefill_dtype, load_err, sizeof load_err))) {
        char e[1024];
        srv_log(SRV_LOG_ERROR, "prefill_dtype_refused", "\"prefill_dtype\":\"%s\",\"error\":\"%s\"",
                app->cfg.prefill_dtype, srv_log_str(load_err[0] ? load_err : recur_strerror(rc), e, sizeof e));
        recur_model_free(app->model);
        app->model = NULL;
        return -1;
    }
    app->info = recur_model_get_info(app->model);
    /* seeded random weights are not the trained model the config may name */
    if (app->cfg.model_config[0])
        snprintf(app->model_name, sizeof app->model_name, "%.64s-seed%llu", app->info->name,
                 (unsigned long long)app->cfg.model_seed);
    else
        snprintf(app->model_name, sizeof app->model_name, "%.64s", app->info->name);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    openblas_set_num_threads(1);

    srv_app *app = &g_app;
    char err[512];
    int rc = srv_config_load(&app->cfg, argc, argv, err, sizeof err);
    if (rc == 1)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "recurd: %s\n", err);
        return 2;
    }
    srv_log_set_level(app->cfg.log_level);
    srv_host_addr bind_addr; /* a name is resolved here; every address it has must be loopback */
    if (srv_host_resolve(app->cfg.host, &bind_addr, err, sizeof err) != 0) {
        char m[600];
        srv_log(SRV_LOG_ERROR, "host_unresolvable", "\"message\":\"%s\"",
                srv_log_str(err, m, sizeof m));
        return 2;
    }
    if (!bind_addr.all_loopback && !app->cfg.api_key[0] && !app->cfg.allow_insecure_bind) {
        char h[300];
        srv_log(SRV_LOG_ERROR, "refusing_insecure_bind",
                "\"host\":\"%s\",\"message\":\"a non-loopback host needs --api-key (or "
                "--allow-insecure-bind); a name counts as loopback only when every address it "
                "resolves to is\"",
                srv_log_str(app->cfg.host, h, sizeof h));
        return 2;
    }
    if (load_model(app) != 0 || srv_text_load(app) != 0 || srv_chat_load(app) != 0)
        return 1;
    if (app->cfg.check_only) {
        srv_config_write_json(&app->cfg, stdout);
        srv_text_free(app);
        recur_model_free(app->model);
        return 0;
    }

    /* A state upload must fit in one body: raise max_body to the largest snapshot if needed. */
    size_t need = proto_state_max_body(app->info);
    if (app->cfg.http.max_body < need) {
        srv_log(SRV_LOG_WARN, "max_body_raised", "\"from\":%zu,\"to\":%zu", app->cfg.http.max_body,
                need);
        app->cfg.http.max_body = need;
    }

    app->loop = uv_default_loop();
    app->table = srv_table_create(app->model, app->cfg.max_sessions);
    if (!app->table)
        return 1;
    if (srv_residency_start(app) != 0)
        return 1; /* state_dir unusable: logged */
    if (start_prefix_cache(app) != 0 || start_access_log(app) != 0)
        return 1;
    srv_metrics_init(app);
    rc = srv_sched_create(app->loop, app->model, app->cfg.workers, app->cfg.max_batch,
                          app->cfg.decode_workers,
                          app->cfg.prefill_slice, srv_ops_work_done, srv_ops_gen_progress, app,
                          &app->sched);
    if (rc != 0) {
        srv_log(SRV_LOG_ERROR, "scheduler_failed", "\"error\":\"%s\"", recur_strerror(rc));
        return 1;
    }
    srv_sched_set_spin(app->sched, (uint64_t)app->cfg.worker_spin_us * 1000);
    srv_http_callbacks cb = {srv_app_on_request, srv_app_on_close, srv_app_on_drain, srv_app_on_head,
                             srv_app_on_done};
    rc = srv_server_start(app->loop, bind_addr.address, app->cfg.port, &app->cfg.http, &cb, app,
                          &app->server);
    if (rc != 0) {
        char h[300];
        srv_log(SRV_LOG_ERROR, "listen_failed",
                "\"host\":\"%s\",\"address\":\"%s\",\"port\":%d,\"error\":\"%s\"",
                srv_log_str(app->cfg.host, h, sizeof h), bind_addr.address, app->cfg.port,
                uv_strerror(rc));
        return 1;
    }
    if (srv_tier_start(app, srv_server_port(app->server)) != 0)
        return 1; /* --redis unusable: logged */
    uv_signal_init(app->loop, &g_sigterm);
    uv_signal_init(app->loop, &g_sigint);
    uv_signal_start(&g_sigterm, on_signal, SIGTERM);
    uv_signal_start(&g_sigint, on_signal, SIGINT);
    uv_signal_init(app->loop, &g_sighup);
    uv_signal_start(&g_sighup, on_sighup, SIGHUP);
    uv_timer_init(app->loop, &g_drain_timer);
    uv_timer_init(app->loop, &g_close_timer);
    uv_timer_init(app->loop, &app->ttl_timer);
    if (app->cfg.idle_ttl_ms) {
        uint64_t every = app->cfg.idle_ttl_ms / 4;
        every = every < 100 ? 100 : every > 10000 ? 10000 : every;
        uv_timer_start(&app->ttl_timer, on_ttl, every, every);
    }
    char h[300], name[200];
    srv_log(SRV_LOG_INFO, "listening",
            "\"host\":\"%s\",\"address\":\"%s\",\"port\":%d,\"model\":\"%s\",\"vocab_size\":%d,"
            "\"n_layers\":%d,\"state_bytes\":%zu,\"state_dtype\":\"%s\",\"weights_dtype\":\"%s\",\"weights_origin\":\"%s\",\"workers\":%d,\"max_batch\":%d,\"decode_workers\":%d,"
            "\"auth\":%s,\"isa\":\"%s\"",
            srv_log_str(app->cfg.host, h, sizeof h), bind_addr.address, srv_server_port(app->server),
            srv_log_str(app->model_name, name, sizeof name), app->info->vocab_size,
            app->info->n_layers, app->info->state_bytes, app->info->state_dtype, app->info->weights_dtype,
            app->info->weights_origin, app->cfg.workers, app->cfg.max_batch,
            app->cfg.decode_workers, app->cfg.api_key[0] ? "true" : "false", recur_isa_name());

    srv_sd_notify("READY=1"); /* listening: a Type=notify unit is started */
    uv_run(app->loop, UV_RUN_DEFAULT);

    srv_server_free(app->server);
    rc = uv_loop_close(app->loop);
    if (rc != 0)
        srv_log(SRV_LOG_WARN, "loop_close_busy", "\"error\":\"%s\"", uv_strerror(rc));
    srv_sched_free(app->sched);
    srv_residency_free(app);
    srv_tier_free(app);
    srv_pcache_free(app->pcache);
    srv_table_destroy(app->table);
    srv_text_free(app);
    srv_chat_free(app);
    recur_model_free(app->model);
    srv_access_log_close(app->access_log); /* every request's line is written */
    srv_log(SRV_LOG_INFO, "exit", "\"code\":0");
    return 0;
}
