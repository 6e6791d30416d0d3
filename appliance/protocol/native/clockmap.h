/*
 * clockmap.h: served time from host time, the one implementation.  Every native path (the NTP data plane, the PTP
 * event sender) and the Python ClockMap (appliance/protocol/clockmap.py, through dataplane.c) compute the served
 * clock with these functions.
 *
 * The map is an anchor pair and a rate: served TAI = served anchor + elapsed + round(elapsed * rate_ppb * 1e-9),
 * rounded half to even (nearbyint() in the default floating-point mode, as Python's round()).  NTP counts UTC
 * without leap seconds: during an inserted leap second the map repeats 23:59:59, as the Linux kernel does.
 */
#ifndef APPLIANCE_CLOCKMAP_H
#define APPLIANCE_CLOCKMAP_H

#include <math.h>
#include <stdint.h>

#define CM_NS_PER_S 1000000000LL

/* The packed ClockMap ("<BBBbbxxxII4sqqdiiqQQ" in clockmap.py), as published in the NTP workers' shared memory. */
typedef struct __attribute__((packed)) {
    uint8_t valid, leap, stratum;
    int8_t precision, poll_min;
    uint8_t pad[3];
    uint32_t root_delay, root_dispersion;
    uint8_t refid[4];
    int64_t host_anchor_ns, served_anchor_tai_ns;
    double rate_ppb;
    int32_t tai_utc_s, leap_delta_s;
    int64_t leap_at_tai_ns;
    uint64_t reference_ts, generation;
} clock_map;

static inline int64_t cm_served_tai_ns(int64_t host_anchor_ns, int64_t served_anchor_tai_ns, double rate_ppb,
                                       int64_t host_ns) {
    int64_t elapsed = host_ns - host_anchor_ns;
    return served_anchor_tai_ns + elapsed + (int64_t)nearbyint(((double)elapsed * rate_ppb) * 1e-9);
}

/* Served UTC as POSIX counts it (what NTP timestamps encode), from served TAI. */
static inline int64_t cm_posix_of_tai(int64_t tai, int32_t tai_utc_s, int32_t leap_delta_s, int64_t leap_at_tai_ns) {
    if (leap_at_tai_ns && tai >= leap_at_tai_ns) return tai - (int64_t)(tai_utc_s + leap_delta_s) * CM_NS_PER_S;
    if (leap_at_tai_ns && leap_delta_s > 0 && tai >= leap_at_tai_ns - CM_NS_PER_S)
        return tai - (int64_t)(tai_utc_s + 1) * CM_NS_PER_S;  /* inside 23:59:60: repeat 23:59:59 */
    return tai - (int64_t)tai_utc_s * CM_NS_PER_S;
}

static inline int64_t cm_served_posix_ns(const clock_map *m, int64_t host_ns) {
    return cm_posix_of_tai(cm_served_tai_ns(m->host_anchor_ns, m->served_anchor_tai_ns, m->rate_ppb, host_ns),
                           m->tai_utc_s, m->leap_delta_s, m->leap_at_tai_ns);
}

#endif
