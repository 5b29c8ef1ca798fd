/* test_config.c — recurd's configuration: defaults, config file, flags (flags win), and the
 * errors for unknown keys, bad values and bad flags. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

static int load(srv_config *c, char *err, int argc, char **argv)
{
    return srv_config_load(c, argc, argv, err, 256);
}

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/recurd_cfg_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

Test(config, defaults_without_file)
{
    srv_config c;
    char err[256];
    char *argv[] = {"recurd", "--config", ""};
    cr_assert_eq(load(&c, err, 3, argv), 0, "%s", err);
    cr_assert_str_eq(c.host, "127.0.0.1");
    cr_assert_eq(c.port, 8080);
    cr_assert_str_eq(c.model, "models/default");
    cr_assert_eq(c.max_tokens_per_request, 131072);
    cr_assert_eq(c.http.max_body, 1 << 20);
    cr_assert_eq(c.http.header_timeout, 10000);
    cr_assert_eq(c.drain_timeout_ms, 30000);
}

Test(config, file_then_flags)
{
    srv_config c;
    char err[256];
    char *path = write_tmp("{\"port\": 9000, \"max_sessions\": 5, \"api_key\": \"k\","
                           " \"allow_insecure_bind\": true, \"max_body\": 2048}");
    char *argv[] = {"recurd", "--config", path, "--max-sessions", "7", "--port=0",
                    "--model-config", "x.json", "--allow-insecure-bind=false"};
    cr_assert_eq(load(&c, err, 9, argv), 0, "%s", err);
    cr_assert_eq(c.port, 0);
    cr_assert_eq(c.max_sessions, 7);
    cr_assert_str_eq(c.api_key, "k");
    cr_assert_eq(c.http.max_body, 2048);
    cr_assert_str_eq(c.model_config, "x.json");
    cr_assert_eq(c.allow_insecure_bind, 0);
    unlink(path);
}

Test(config, rejections)
{
    srv_config c;
    char err[256];
    static const char *files[] = {
        "{\"prot\": 1}",                 /* unknown key */
        "{\"port\": \"80\"}",            /* wrong type */
        "{\"port\": 70000}",             /* out of range */
        "{\"workers\": 1.5}",            /* not an integer */
        "{\"allow_insecure_bind\": 1}",  /* bool must be a bool */
        "[1]",
        "{\"port\": 1,}",
        "{\"write_low_watermark\": 300000}", /* low >= high */
        "{\"log_level\": \"loud\"}",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *path = write_tmp(files[i]);
        char *argv[] = {"recurd", "--config", path};
        cr_assert_eq(load(&c, err, 3, argv), -1, "accepted %s", files[i]);
        cr_assert(strlen(err) > 0);
        unlink(path);
    }
    char *bad1[] = {"recurd", "--config", "", "--nope", "1"};
    cr_assert_eq(load(&c, err, 5, bad1), -1);
    char *bad2[] = {"recurd", "--config", "", "--port", "12x"};
    cr_assert_eq(load(&c, err, 5, bad2), -1);
    char *bad3[] = {"recurd", "--config", "", "--port"};
    cr_assert_eq(load(&c, err, 4, bad3), -1);
    char *bad4[] = {"recurd", "--config", "/nonexistent/recurd.json"};
    cr_assert_eq(load(&c, err, 3, bad4), -1);
    char *bad5[] = {"recurd", "--config", "", "stray"};
    cr_assert_eq(load(&c, err, 4, bad5), -1);
}

/* issue 10 item 10: a RECURD_API_KEY longer than the key buffer (255 bytes) is refused at start
 * like --api-key and the file's api_key, never truncated to its first 255 bytes; one that fits is
 * used whole; --api-key still wins over it. */
Test(config, env_api_key_length)
{
    srv_config c;
    char err[256];
    char key[301];
    memset(key, 'k', 300);
    key[300] = '\0';
    char *argv[] = {"recurd", "--config", ""};
    setenv("RECURD_API_KEY", key, 1);
    cr_assert_eq(load(&c, err, 3, argv), -1, "a 300-byte RECURD_API_KEY was accepted");
    cr_assert(strstr(err, "RECURD_API_KEY") && strstr(err, "too long"), "%s", err);
    char *argv_flag[] = {"recurd", "--config", "", "--api-key", "short"};
    cr_assert_eq(load(&c, err, 5, argv_flag), 0, "%s", err);
    cr_assert_str_eq(c.api_key, "short");
    key[255] = '\0';
    setenv("RECURD_API_KEY", key, 1);
    cr_assert_eq(load(&c, err, 3, argv), 0, "%s", err);
    cr_assert_eq(strlen(c.api_key), 255);
    cr_assert_str_eq(c.api_key, key);
    /* the config file's api_key wins over the environment */
    char *path = write_tmp("{\"api_key\": \"fromfile\"}");
    char *argv_file[] = {"recurd", "--config", path};
    cr_assert_eq(load(&c, err, 3, argv_file), 0, "%s", err);
    cr_assert_str_eq(c.api_key, "fromfile");
    unlink(path);
    unsetenv("RECURD_API_KEY");
}

/* issue 10 item 15: --host is resolved at start and the loopback rule applies to every address
 * (a name used to pass the rule by its spelling, then fail to bind with "invalid argument"). */
#include <arpa/inet.h>
#include <netinet/in.h>

#include "hostaddr.h"

static int loopback4(const char *ip)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    cr_assert_eq(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    return srv_sockaddr_is_loopback((struct sockaddr *)&a);
}

static int loopback6(const char *ip)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6};
    cr_assert_eq(inet_pton(AF_INET6, ip, &a.sin6_addr), 1);
    return srv_sockaddr_is_loopback((struct sockaddr *)&a);
}

Test(config, loopback_rule)
{
    cr_expect(loopback4("127.0.0.1"));
    cr_expect(loopback4("127.255.3.4"));
    cr_expect(!loopback4("128.0.0.1"));
    cr_expect(!loopback4("0.0.0.0"));
    cr_expect(!loopback4("10.0.0.1"));
    cr_expect(loopback6("::1"));
    cr_expect(loopback6("::ffff:127.0.0.2"));
    cr_expect(!loopback6("::"));
    cr_expect(!loopback6("::ffff:10.0.0.1"));
    cr_expect(!loopback6("fe80::1"));
}

Test(config, host_names_are_resolved)
{
    srv_host_addr h;
    char err[256];
    cr_assert_eq(srv_host_resolve("localhost", &h, err, sizeof err), 0, "%s", err);
    cr_expect(h.all_loopback);
    cr_expect(h.n_addresses >= 1);
    cr_expect(!strcmp(h.address, "127.0.0.1") || !strcmp(h.address, "::1"), "%s", h.address);
    cr_assert_eq(srv_host_resolve("127.0.0.1", &h, err, sizeof err), 0, "%s", err);
    cr_expect(h.all_loopback && !strcmp(h.address, "127.0.0.1") && h.n_addresses == 1);
    cr_assert_eq(srv_host_resolve("::1", &h, err, sizeof err), 0, "%s", err);
    cr_expect(h.all_loopback && !strcmp(h.address, "::1"));
    cr_assert_eq(srv_host_resolve("0.0.0.0", &h, err, sizeof err), 0, "%s", err);
    cr_expect(!h.all_loopback && !strcmp(h.address, "0.0.0.0"));
    cr_assert_eq(srv_host_resolve("::", &h, err, sizeof err), 0, "%s", err);
    cr_expect(!h.all_loopback);
    cr_expect_eq(srv_host_resolve("no-such-host.invalid", &h, err, sizeof err), -1);
    cr_expect(strstr(err, "no-such-host.invalid") && strstr(err, "does not resolve"), "%s", err);
    cr_expect(!h.all_loopback);
    cr_expect_eq(srv_host_resolve("", &h, err, sizeof err), -1);
}
