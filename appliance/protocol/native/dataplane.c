/*
 * dataplane: the data plane's shared pieces, for Python.  Served time from a clock map (clockmap.h), the token bucket
 * and the per-client rate table (bucket.h), and the lateness histogram's bins (lateness.h): Python calls these, so
 * each is written once, in the headers the NTP data plane and the PTP event sender compile too.  Pure computation:
 * no I/O, no clock reads (every instant is an argument).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "bucket.h"
#include "clockmap.h"
#include "lateness.h"

static PyObject *n_served_tai_ns(PyObject *mod, PyObject *args) {
    long long host_anchor, served_anchor, host;
    double rate;
    if (!PyArg_ParseTuple(args, "LLdL", &host_anchor, &served_anchor, &rate, &host)) return NULL;
    return PyLong_FromLongLong(cm_served_tai_ns(host_anchor, served_anchor, rate, host));
}

static PyObject *n_posix_of_tai(PyObject *mod, PyObject *args) {
    long long tai, leap_at;
    int tai_utc, leap_delta;
    if (!PyArg_ParseTuple(args, "LiiL", &tai, &tai_utc, &leap_delta, &leap_at)) return NULL;
    return PyLong_FromLongLong(cm_posix_of_tai(tai, tai_utc, leap_delta, leap_at));
}

static PyObject *n_lateness_bin(PyObject *mod, PyObject *arg) {
    long long us = PyLong_AsLongLong(arg);
    if (us == -1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(lateness_bin(us));
}

/* ------------------------------------------------------------------------------------------------ RateTable */

typedef struct {
    PyObject_HEAD
    rate_table t;
    int ready;
} RateTable;

static int rt_py_init(RateTable *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"rate_per_s", "burst", "max_clients", NULL};
    double rate;
    int burst, max_clients = 65536;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "di|i", kw, &rate, &burst, &max_clients)) return -1;
    if (!(rate >= 0 && rate < 1e12)) { PyErr_SetString(PyExc_ValueError, "rate_per_s must be finite and >= 0"); return -1; }
    if (burst < 1 || max_clients < 1 || max_clients > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "burst >= 1 and 1 <= max_clients <= 16777216");
        return -1;
    }
    if (self->ready) rt_free(&self->t);
    self->ready = 0;
    if (rt_init(&self->t, rate, burst, max_clients)) { rt_free(&self->t); PyErr_NoMemory(); return -1; }
    self->ready = 1;
    return 0;
}

static void rt_py_dealloc(RateTable *self) {
    if (self->ready) rt_free(&self->t);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *rt_py_check(RateTable *self, PyObject *args) {
    const char *key;
    Py_ssize_t len;
    long long now;
    if (!PyArg_ParseTuple(args, "y#L", &key, &len, &now)) return NULL;
    if (!self->ready) return PyErr_Format(PyExc_RuntimeError, "RateTable not initialised");
    if (len < 1 || len > TB_KEY_MAX) return PyErr_Format(PyExc_ValueError, "a key is 1..%d bytes", TB_KEY_MAX);
    return PyLong_FromLong(rt_check(&self->t, (const uint8_t *)key, (int)len, now));
}

static PyObject *rt_py_counters(RateTable *self, PyObject *noargs) {
    rate_table *t = &self->t;
    return Py_BuildValue("(KKKKi)", (unsigned long long)t->passed, (unsigned long long)t->kod,
                         (unsigned long long)t->dropped, (unsigned long long)t->evictions, t->size);
}

/* Every entry, least recently seen first: (key, tokens, last_ns, last_kod_ns or None), and the counters. */
static PyObject *rt_py_state(RateTable *self, PyObject *noargs) {
    rate_table *t = &self->t;
    PyObject *rows = PyList_New(0);
    if (!rows) return NULL;
    for (int32_t i = t->head; i >= 0; i = t->entries[i].next) {
        rt_entry *e = &t->entries[i];
        PyObject *kod = e->has_kod ? PyLong_FromLongLong(e->last_kod_ns) : Py_NewRef(Py_None);
        PyObject *row = kod ? Py_BuildValue("(y#dLN)", (const char *)e->key, (Py_ssize_t)e->keylen, e->bucket.tokens,
                                            (long long)e->bucket.last_ns, kod) : NULL;
        if (!row || PyList_Append(rows, row) < 0) { Py_XDECREF(row); Py_DECREF(rows); return NULL; }
        Py_DECREF(row);
    }
    return Py_BuildValue("(N(KKKK))", rows, (unsigned long long)t->passed, (unsigned long long)t->kod,
                         (unsigned long long)t->dropped, (unsigned long long)t->evictions);
}

/* The inverse of state(), into an empty table of the same parameters. */
static PyObject *rt_py_load(RateTable *self, PyObject *state) {
    rate_table *t = &self->t;
    PyObject *rows;
    unsigned long long passed, kod, dropped, evictions;
    if (!PyArg_ParseTuple(state, "O(KKKK)", &rows, &passed, &kod, &dropped, &evictions)) return NULL;
    if (t->size) return PyErr_Format(PyExc_ValueError, "load() needs an empty table");
    Py_ssize_t n = PySequence_Size(rows);
    if (n < 0) return NULL;
    if (n > t->max_clients) return PyErr_Format(PyExc_ValueError, "more entries than max_clients");
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *row = PySequence_GetItem(rows, k), *kod_obj;
        const char *key;
        Py_ssize_t len;
        double tokens;
        long long last;
        int ok = row && PyArg_ParseTuple(row, "y#dLO", &key, &len, &tokens, &last, &kod_obj);
        if (ok && (len < 1 || len > TB_KEY_MAX)) { PyErr_SetString(PyExc_ValueError, "bad key"); ok = 0; }
        long long kod_ns = ok && kod_obj != Py_None ? PyLong_AsLongLong(kod_obj) : 0;
        if (ok && PyErr_Occurred()) ok = 0;
        Py_XDECREF(row);
        if (!ok) return NULL;
        int32_t i = t->size++;
        rt_entry *e = &t->entries[i];
        memcpy(e->key, key, (size_t)len);
        e->keylen = (uint8_t)len;
        e->bucket.tokens = tokens;
        e->bucket.last_ns = last;
        e->has_kod = kod_obj != Py_None;
        e->last_kod_ns = kod_ns;
        uint32_t b = rt_hash(e->key, e->keylen) & (t->nbuckets - 1);
        e->hnext = t->buckets[b];
        t->buckets[b] = i;
        rt_append(t, i);
    }
    t->passed = passed;
    t->kod = kod;
    t->dropped = dropped;
    t->evictions = evictions;
    Py_RETURN_NONE;
}

static PyMethodDef rt_methods[] = {
    {"state", (PyCFunction)rt_py_state, METH_NOARGS, "([(key, tokens, last_ns, last_kod_ns)], counters), LRU first"},
    {"load", (PyCFunction)rt_py_load, METH_O, "load(state): an empty table takes a state()"},
    {"check", (PyCFunction)rt_py_check, METH_VARARGS, "check(key, now_ns) -> 0 PASS, 1 KOD, 2 DROP"},
    {"counters", (PyCFunction)rt_py_counters, METH_NOARGS, "(passed, kod, dropped, evictions, size)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RateTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.protocol.dataplane.RateTable",
    .tp_basicsize = sizeof(RateTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)rt_py_init,
    .tp_dealloc = (destructor)rt_py_dealloc,
    .tp_methods = rt_methods,
    .tp_doc = "A token bucket per client key in a true-LRU table (bucket.h).",
};

/* --------------------------------------------------------------------------------------------------- Bucket */

typedef struct {
    PyObject_HEAD
    tb_bucket b;
    double rate_per_s, burst;
} Bucket;

static int b_init(Bucket *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"rate_per_s", "burst", "now_ns", NULL};
    double rate, burst;
    long long now;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ddL", kw, &rate, &burst, &now)) return -1;
    if (!(rate >= 0 && rate < 1e12) || !(burst >= 1 && burst < 1e12)) {
        PyErr_SetString(PyExc_ValueError, "rate_per_s >= 0 and burst >= 1, both finite");
        return -1;
    }
    self->rate_per_s = rate;
    self->burst = burst;
    self->b.tokens = burst;
    self->b.last_ns = now;
    return 0;
}

static PyObject *b_take(Bucket *self, PyObject *arg) {
    long long now = PyLong_AsLongLong(arg);
    if (now == -1 && PyErr_Occurred()) return NULL;
    return PyBool_FromLong(tb_take(&self->b, self->rate_per_s, self->burst, now));
}

static PyObject *b_reserve(Bucket *self, PyObject *arg) {
    long long now = PyLong_AsLongLong(arg);
    if (now == -1 && PyErr_Occurred()) return NULL;
    if (self->rate_per_s <= 0) return PyLong_FromLong(0);
    return PyLong_FromLongLong(tb_reserve_ns(&self->b, self->rate_per_s, self->burst, now));
}

static PyObject *b_give_back(Bucket *self, PyObject *noargs) {
    self->b.tokens += 1.0;
    Py_RETURN_NONE;
}

static PyObject *b_tokens(Bucket *self, void *closure) { return PyFloat_FromDouble(self->b.tokens); }

static PyMethodDef b_methods[] = {
    {"take", (PyCFunction)b_take, METH_O, "take(now_ns) -> True if a token was taken"},
    {"reserve", (PyCFunction)b_reserve, METH_O, "reserve(now_ns) -> ns to wait for the token reserved (0: now)"},
    {"give_back", (PyCFunction)b_give_back, METH_NOARGS, "give back a reserved token"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef b_getset[] = {{"tokens", (getter)b_tokens, NULL, "tokens held (negative: reserved ahead)", NULL},
                                 {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject BucketType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "appliance.protocol.dataplane.Bucket",
    .tp_basicsize = sizeof(Bucket),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)b_init,
    .tp_methods = b_methods,
    .tp_getset = b_getset,
    .tp_doc = "One token bucket (bucket.h): take, or reserve and wait.",
};

static PyMethodDef module_methods[] = {
    {"served_tai_ns", n_served_tai_ns, METH_VARARGS,
     "served_tai_ns(host_anchor_ns, served_anchor_tai_ns, rate_ppb, host_ns) -> served TAI ns"},
    {"posix_of_tai", n_posix_of_tai, METH_VARARGS,
     "posix_of_tai(tai_ns, tai_utc_s, leap_delta_s, leap_at_tai_ns) -> served POSIX ns (23:59:59 repeated in a leap)"},
    {"lateness_bin", n_lateness_bin, METH_O, "lateness_bin(us) -> the histogram bin of a lateness"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dataplane", "the data plane's shared pieces", -1,
                                    module_methods};

PyMODINIT_FUNC PyInit_dataplane(void) {
    if (PyType_Ready(&RateTableType) < 0 || PyType_Ready(&BucketType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RateTableType);
    Py_INCREF(&BucketType);
    if (PyModule_AddObject(m, "RateTable", (PyObject *)&RateTableType) < 0 ||
        PyModule_AddObject(m, "Bucket", (PyObject *)&BucketType) < 0)
        return NULL;
    PyModule_AddIntConstant(m, "LATENESS_BINS", LATENESS_BINS);
    PyModule_AddIntConstant(m, "KEY_MAX", TB_KEY_MAX);
    return m;
}
