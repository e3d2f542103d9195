/* page_reporting.h -- the VM's free page reporting passes so far, for the
 * probes that time memory work against it (collapse_stall.c,
 * report_copy.c): a counter of this guest kernel's page_reporting module,
 * -1 on kernels without it. */
#ifndef PAGE_REPORTING_H
#define PAGE_REPORTING_H

#include <stdio.h>

static inline long reportingPasses(void) {
    long n = -1;
    FILE *f = fopen("/sys/module/page_reporting/parameters/passes", "r");
    if (f) {
        if (fscanf(f, "%ld", &n) != 1) n = -1;
        fclose(f);
    }
    return n;
}

#endif /* PAGE_REPORTING_H */
