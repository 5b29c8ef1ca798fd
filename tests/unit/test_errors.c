/* test_errors.c — every RECUR_E* code has its own description. */
#include <criterion/criterion.h>
#include <string.h>
#include "recur.h"

Test(errors, every_code_is_named_and_distinct)
{
    for (int a = RECUR_ENOENT; a <= RECUR_OK; a++) {
        cr_assert_str_neq(recur_strerror(a), "unknown error", "code %d unnamed", a);
        for (int b = a + 1; b <= RECUR_OK; b++)
            cr_assert(strcmp(recur_strerror(a), recur_strerror(b)) != 0, "%d and %d share a name", a, b);
    }
    cr_assert_str_eq(recur_strerror(-9999), "unknown error");
}
