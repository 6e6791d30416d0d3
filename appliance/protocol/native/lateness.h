/*
 * lateness.h: the Sync lateness record's histogram, the one implementation (appliance/outputs/ptp/lateness.py
 * calls it through dataplane.c; the PTP event sender fills it).  Whole microseconds, 1 us wide bins below 32 us, then
 * 16 bins per octave up to about 67 s, the last bin open-ended.
 */
#ifndef APPLIANCE_LATENESS_H
#define APPLIANCE_LATENESS_H

#include <stdint.h>

#define LATENESS_SUB_BITS 4
#define LATENESS_SUB (1 << LATENESS_SUB_BITS)
#define LATENESS_TOP_SHIFT 22
#define LATENESS_BINS ((LATENESS_TOP_SHIFT << LATENESS_SUB_BITS) + 2 * LATENESS_SUB)

/* The bin of a lateness in whole microseconds (negative counts as 0: on time). */
static inline int lateness_bin(int64_t us) {
    uint64_t v = us < 0 ? 0 : (uint64_t)us;
    if (v < 2 * LATENESS_SUB) return (int)v;
    int shift = (64 - __builtin_clzll(v)) - LATENESS_SUB_BITS - 1;
    if (shift > LATENESS_TOP_SHIFT) return LATENESS_BINS - 1;
    return (shift << LATENESS_SUB_BITS) + (int)(v >> shift);
}

/* Whole microseconds of a lateness in ns, floored (as Python's //). */
static inline int64_t lateness_us(int64_t ns) { return ns >= 0 ? ns / 1000 : -((-ns + 999) / 1000); }

#endif
