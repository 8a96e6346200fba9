/* The pool's serve_ops loop (cupool.allocator.fastpath), compiled.
 *
 * serve_loop(ops, j, i, missed, blocks, ptrs, transient, tickets, ctx) does for ops[j:]
 * what the pure-Python loop of make_fast_paths().serve_ops does while the caller holds the
 * pool's lock: per op, its frees (a block booked in `tickets` goes back through its
 * ticket's release, any other is popped from `blocks`), then each (key, bytes, planned
 * address) of its allocs served through the planned path (ticket_locked below, the same
 * steps in the same order as the Python closure of that name, calling the same Python
 * methods on its rare branches: a ticket of another region, an overdue block, a slot off
 * the plan, no active arena). A transient key's ticket is booked in `tickets`; any other
 * block is handed out by ctx's hand_out(blocks, key, ticket, rounded).
 *
 * `i` is where to start in op j: -1 for its frees first, else the alloc to resume at
 * (the frees done). Returns (status, j, i, missed):
 *   DONE   (0): every op served with every block at its planned address;
 *   MISSED (1): op j had `missed` blocks elsewhere (all of its pool work done);
 *   SLOW   (2): alloc i of op j has a size that is not a positive int: the caller serves it
 *               with malloc (outside the lock) and resumes at i + 1 with `missed`.
 *
 * ctx is the tuple (state, counters, pending, allocate_locked, allocate_off_plan,
 * free_ticket, hand_out): state.arena is the active PlannedArena or None; counters holds
 * allocated_bytes_current and allocated_bytes_peak; pending is the free queue (a deque).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>

#include "../_members.h"

enum { DONE = 0, MISSED = 1, SLOW = 2 };

static PyObject *s_arena, *s_live, *s_cursor, *s_slots, *s_due, *s_serves, *s_ticket,
    *s_current, *s_peak, *s_size, *s_region, *s_slot, *s_ptr, *s_release, *s_popleft,
    *s_end_overdue, *s_make_overdue;

typedef struct {
    PyObject *state, *counters, *pending, *allocate_locked, *allocate_off_plan,
        *free_ticket, *hand_out;
    PyObject *popleft; /* pending.popleft, read once per call */
} Ctx;

static Member m_due = {&s_due, NULL, 0}, m_serves = {&s_serves, NULL, 0},
              m_ticket = {&s_ticket, NULL, 0}, m_size = {&s_size, NULL, 0},
              m_region = {&s_region, NULL, 0}, m_slot = {&s_slot, NULL, 0},
              m_ptr = {&s_ptr, NULL, 0}, m_release = {&s_release, NULL, 0};

/* The pool state the planned path reads and writes, held here between the pool's own
 * methods: the active arena (None outside planned iterations) with its live flags, slots
 * and cursor, and the allocated-bytes gauge. Only the pool changes them, under the lock
 * the caller holds; the loop writes them back (view_store) before it calls one of the
 * pool's methods or returns, and reads them again (view_load) after such a call. */
typedef struct {
    PyObject *arena, *live, *slots;
    long long cursor, current, peak, peak_read;
} View;

static long long as_ll(PyObject *v) {
    if (v == NULL) return -1;
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return x;
}

static int set_attr_ll(PyObject *obj, PyObject *name, long long x) {
    PyObject *v = PyLong_FromLongLong(x);
    if (v == NULL) return -1;
    int r = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return r;
}

static void view_clear(View *v) {
    Py_CLEAR(v->arena);
    Py_CLEAR(v->live);
    Py_CLEAR(v->slots);
}

static int view_load(Ctx *c, View *v) {
    view_clear(v);
    v->current = as_ll(PyObject_GetAttr(c->counters, s_current));
    if (v->current == -1 && PyErr_Occurred()) return -1;
    v->peak = v->peak_read = as_ll(PyObject_GetAttr(c->counters, s_peak));
    if (v->peak == -1 && PyErr_Occurred()) return -1;
    v->arena = PyObject_GetAttr(c->state, s_arena);
    if (v->arena == NULL) return -1;
    if (v->arena == Py_None) return 0;
    v->live = PyObject_GetAttr(v->arena, s_live);
    v->slots = PyObject_GetAttr(v->arena, s_slots);
    if (v->live == NULL || v->slots == NULL) return -1;
    v->cursor = as_ll(PyObject_GetAttr(v->arena, s_cursor));
    if (v->cursor == -1 && PyErr_Occurred()) return -1;
    return 0;
}

static int view_store(Ctx *c, View *v) {
    if (v->arena == NULL) return 0; /* not loaded (or a load failed): nothing held */
    if (v->arena != Py_None && set_attr_ll(v->arena, s_cursor, v->cursor) < 0) return -1;
    if (set_attr_ll(c->counters, s_current, v->current) < 0) return -1;
    if (v->peak != v->peak_read) {
        if (set_attr_ll(c->counters, s_peak, v->peak) < 0) return -1;
        v->peak_read = v->peak;
    }
    return 0;
}

/* One of the pool's methods, with the view written back before and read again after. */
static PyObject *pool_call(Ctx *c, View *v, PyObject *fn, const char *format, ...) {
    if (view_store(c, v) < 0) return NULL;
    va_list va;
    va_start(va, format);
    PyObject *args = Py_VaBuildValue(format, va);
    va_end(va);
    if (args == NULL) return NULL;
    PyObject *r = PyObject_CallObject(fn, args);
    Py_DECREF(args);
    if (view_load(c, v) < 0) Py_CLEAR(r);
    return r;
}

/* live[j] truthy: 1, falsy: 0, error: -1. */
static int live_at(PyObject *live, PyObject *j) {
    if (PyList_CheckExact(live) && PyLong_CheckExact(j)) {
        Py_ssize_t at = PyLong_AsSsize_t(j);
        if (at >= 0 && at < PyList_GET_SIZE(live))
            return PyObject_IsTrue(PyList_GET_ITEM(live, at));
        PyErr_Clear();
    }
    PyObject *v = PyObject_GetItem(live, j);
    if (v == NULL) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

static int set_live(PyObject *live, PyObject *j, long value) {
    PyObject *v = PyLong_FromLong(value);
    if (v == NULL) return -1;
    int r = PyObject_SetItem(live, j, v);
    Py_DECREF(v);
    return r;
}

/* The pool's own methods never switch the active arena, which the Python closure reads
 * once per block: if one did, serving stops with this error rather than go on with
 * another arena's state. */
static PyObject *arena_changed(void) {
    PyErr_SetString(PyExc_RuntimeError, "serve_loop: the pool's active arena changed while "
                                        "a block was being served");
    return NULL;
}

/* The planned path's ticket for `rounded` bytes (new reference; NULL on error): the
 * Python closure ticket_locked, step by step, over the view. */
static PyObject *ticket_locked(Ctx *c, View *v, long long rounded) {
    if (v->arena == Py_None) return pool_call(c, v, c->allocate_locked, "(L)", rounded);
    PyObject *arena = v->arena;
    Py_ssize_t queued = PyObject_Length(c->pending);
    if (queued < 0) return NULL;
    if (queued) { /* Regions.drain(), specialised for blocks of the active plan */
        while ((queued = PyObject_Length(c->pending)) > 0) {
            PyObject *ticket = PyObject_CallNoArgs(c->popleft);
            if (ticket == NULL) return NULL;
            long long size = as_ll(member_get(&m_size, ticket));
            if (size == -1 && PyErr_Occurred()) { Py_DECREF(ticket); return NULL; }
            v->current -= size;
            PyObject *region = member_get(&m_region, ticket);
            if (region == NULL) { Py_DECREF(ticket); return NULL; }
            int ok = 0;
            if (region == arena) {
                PyObject *j = member_get(&m_slot, ticket);
                if (j != NULL) {
                    int t = live_at(v->live, j);
                    if (t == 1) ok = set_live(v->live, j, 0) == 0;
                    else if (t == 0) {
                        PyObject *end = PyObject_GetAttr(arena, s_end_overdue);
                        PyObject *r = end != NULL ? pool_call(c, v, end, "(O)", j) : NULL;
                        ok = r != NULL;
                        Py_XDECREF(r);
                        Py_XDECREF(end);
                    }
                    Py_DECREF(j);
                }
            } else {
                PyObject *r = pool_call(c, v, c->free_ticket, "(O)", ticket);
                ok = r != NULL;
                Py_XDECREF(r);
            }
            Py_DECREF(region);
            Py_DECREF(ticket);
            if (!ok) return NULL;
            if (v->arena != arena) return arena_changed();
        }
        if (queued < 0) return NULL;
    }
    long long k = v->cursor;
    v->cursor = k + 1;
    Py_ssize_t nslots = PyObject_Length(v->slots);
    if (nslots < 0) return NULL;
    if (k >= nslots) /* more allocations than the plan has */
        return pool_call(c, v, c->allocate_off_plan, "(OLL)", arena, k, rounded);
    PyObject *slot = PySequence_GetItem(v->slots, (Py_ssize_t)k);
    if (slot == NULL) return NULL;
    PyObject *due = member_get(&m_due, slot);
    if (due == NULL) { Py_DECREF(slot); return NULL; }
    Py_ssize_t ndue = PyObject_Length(due);
    for (Py_ssize_t d = 0; d < ndue && slot != NULL; d++) {
        PyObject *j = PySequence_GetItem(due, d);
        if (j == NULL) { Py_CLEAR(slot); break; }
        int t = live_at(v->live, j);
        if (t == 1 && set_live(v->live, j, 0) == 0) {
            PyObject *overdue = PyObject_GetAttr(v->arena, s_make_overdue);
            PyObject *r = overdue != NULL ? pool_call(c, v, overdue, "(O)", j) : NULL;
            Py_XDECREF(overdue);
            Py_XDECREF(r);
            if (r != NULL && v->arena != arena) {
                Py_DECREF(j);
                Py_DECREF(due);
                Py_DECREF(slot);
                return arena_changed();
            }
            Py_SETREF(slot, r != NULL ? PySequence_GetItem(v->slots, (Py_ssize_t)k) : NULL);
        } else if (t != 0) {
            Py_CLEAR(slot);
        }
        Py_DECREF(j);
    }
    Py_DECREF(due);
    if (slot == NULL || ndue < 0) { Py_XDECREF(slot); return NULL; }
    long long serves = as_ll(member_get(&m_serves, slot));
    if (serves == -1 && PyErr_Occurred()) { Py_DECREF(slot); return NULL; }
    if (serves != rounded) { /* another size, or blocked */
        Py_DECREF(slot);
        return pool_call(c, v, c->allocate_off_plan, "(OLL)", v->arena, k, rounded);
    }
    PyObject *key = PyLong_FromLongLong(k);
    int r = key != NULL ? set_live(v->live, key, 1) : -1;
    Py_XDECREF(key);
    if (r < 0) { Py_DECREF(slot); return NULL; }
    v->current += rounded;
    if (v->current > v->peak) v->peak = v->current;
    PyObject *ticket = member_get(&m_ticket, slot);
    Py_DECREF(slot);
    return ticket;
}

/* A key's free: a booked transient ticket back through its release, any other block
 * popped from `blocks` (its death queues its ticket). 0, or -1 on error. */
static int free_key(PyObject *key, PyObject *blocks, PyObject *tickets) {
    PyObject *booked = PyDict_GetItemWithError(tickets, key);
    if (booked == NULL) {
        if (PyErr_Occurred()) return -1;
        int has = PyDict_Contains(blocks, key);
        if (has < 0) return -1;
        return has ? PyDict_DelItem(blocks, key) : 0;
    }
    Py_INCREF(booked);
    if (PyDict_DelItem(tickets, key) < 0) { Py_DECREF(booked); return -1; }
    PyObject *ticket = PyTuple_GET_ITEM(booked, 0);
    PyObject *release = member_get(&m_release, ticket);
    PyObject *r = release != NULL ? PyObject_CallOneArg(release, ticket) : NULL;
    Py_XDECREF(release);
    Py_DECREF(booked);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static PyObject *status(int what, Py_ssize_t j, Py_ssize_t i, Py_ssize_t missed) {
    return Py_BuildValue("(innn)", what, j, i, missed);
}

static PyObject *serve_loop(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "serve_loop takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *ops = args[0], *blocks = args[4], *ptrs = args[5], *transient = args[6],
             *tickets = args[7], *ctx = args[8];
    Py_ssize_t j = PyLong_AsSsize_t(args[1]), i = PyLong_AsSsize_t(args[2]),
               missed = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (!PyDict_CheckExact(blocks) || !PyDict_CheckExact(ptrs) || !PyDict_CheckExact(tickets)
        || !PyTuple_CheckExact(ctx) || PyTuple_GET_SIZE(ctx) != 7) {
        PyErr_SetString(PyExc_TypeError, "serve_loop: blocks, ptrs and tickets must be dicts "
                                         "and ctx a 7-tuple");
        return NULL;
    }
    Ctx c = {PyTuple_GET_ITEM(ctx, 0), PyTuple_GET_ITEM(ctx, 1), PyTuple_GET_ITEM(ctx, 2),
             PyTuple_GET_ITEM(ctx, 3), PyTuple_GET_ITEM(ctx, 4), PyTuple_GET_ITEM(ctx, 5),
             PyTuple_GET_ITEM(ctx, 6), NULL};
    c.popleft = PyObject_GetAttr(c.pending, s_popleft);
    if (c.popleft == NULL) return NULL;
    PyObject *seq = PySequence_Fast(ops, "serve_loop: ops must be a sequence");
    if (seq == NULL) { Py_DECREF(c.popleft); return NULL; }
    PyObject *result = NULL;
    View v = {NULL, NULL, NULL, 0, 0, 0, 0};
    if (view_load(&c, &v) < 0) goto done;
    Py_ssize_t nops = PySequence_Fast_GET_SIZE(seq);
    for (; j < nops; j++) {
        PyObject *op = PySequence_Fast_GET_ITEM(seq, j);
        PyObject *frees = NULL, *allocs = NULL;
        if (!PyTuple_Check(op) || PyTuple_GET_SIZE(op) != 2) {
            PyErr_SetString(PyExc_TypeError, "serve_loop: each op must be a (frees, allocs) "
                                             "tuple");
            goto done;
        }
        if (i < 0) {
            frees = PySequence_Fast(PyTuple_GET_ITEM(op, 0), "frees must be a sequence");
            if (frees == NULL) goto done;
            Py_ssize_t nfrees = PySequence_Fast_GET_SIZE(frees);
            for (Py_ssize_t f = 0; f < nfrees; f++) {
                if (free_key(PySequence_Fast_GET_ITEM(frees, f), blocks, tickets) < 0) {
                    Py_DECREF(frees);
                    goto done;
                }
            }
            Py_DECREF(frees);
            i = 0;
            missed = 0;
        }
        allocs = PySequence_Fast(PyTuple_GET_ITEM(op, 1), "allocs must be a sequence");
        if (allocs == NULL) goto done;
        Py_ssize_t nallocs = PySequence_Fast_GET_SIZE(allocs);
        for (; i < nallocs; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(allocs, i);
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
                PyErr_SetString(PyExc_TypeError, "serve_loop: each alloc must be a (key, "
                                                 "bytes, planned address) tuple");
                Py_DECREF(allocs);
                goto done;
            }
            PyObject *key = PyTuple_GET_ITEM(item, 0), *nbytes = PyTuple_GET_ITEM(item, 1),
                     *planned = PyTuple_GET_ITEM(item, 2);
            int overflow = 0;
            long long size = PyLong_CheckExact(nbytes)
                ? PyLong_AsLongLongAndOverflow(nbytes, &overflow) : 0;
            if (size <= 0 || overflow || size > (LLONG_MAX - 511)) {
                Py_DECREF(allocs);
                result = status(SLOW, j, i, missed);
                goto done;
            }
            long long rounded = (size + 511) & -512LL;
            PyObject *ticket = ticket_locked(&c, &v, rounded);
            if (ticket == NULL) { Py_DECREF(allocs); goto done; }
            PyObject *ptr = member_get(&m_ptr, ticket);
            int ok = ptr != NULL && PyDict_SetItem(ptrs, key, ptr) == 0;
            if (ok) {
                int is_transient = PySequence_Contains(transient, key);
                PyObject *r = NULL;
                if (is_transient == 1) {
                    PyObject *bytes = PyLong_FromLongLong(rounded);
                    PyObject *booked = bytes != NULL ? PyTuple_Pack(2, ticket, bytes) : NULL;
                    Py_XDECREF(bytes);
                    ok = booked != NULL && PyDict_SetItem(tickets, key, booked) == 0;
                    Py_XDECREF(booked);
                } else if (is_transient == 0) {
                    r = PyObject_CallFunction(c.hand_out, "OOOL", blocks, key, ticket,
                                              rounded);
                    ok = r != NULL;
                    Py_XDECREF(r);
                } else {
                    ok = 0;
                }
            }
            if (ok) {
                int differs = PyObject_RichCompareBool(ptr, planned, Py_NE);
                if (differs < 0) ok = 0;
                else missed += differs;
            }
            Py_XDECREF(ptr);
            Py_DECREF(ticket);
            if (!ok) { Py_DECREF(allocs); goto done; }
        }
        Py_DECREF(allocs);
        i = -1;
        if (missed) {
            result = status(MISSED, j, -1, missed);
            goto done;
        }
    }
    result = status(DONE, nops, -1, 0);
done:
    if (result == NULL) { /* the error stays the one raised; the state goes back as it is */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        if (view_store(&c, &v) < 0) PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    } else if (view_store(&c, &v) < 0) {
        Py_CLEAR(result);
    }
    view_clear(&v);
    Py_DECREF(seq);
    Py_DECREF(c.popleft);
    return result;
}

static PyMethodDef methods[] = {
    {"serve_loop", (PyCFunction)(void (*)(void))serve_loop, METH_FASTCALL,
     "serve_loop(ops, j, i, missed, blocks, ptrs, transient, tickets, ctx) -> "
     "(status, j, i, missed)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_serve",
                                    "The pool's serve_ops loop, compiled.", -1, methods};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__serve(void) {
    INTERN(s_arena, "arena");
    INTERN(s_live, "live");
    INTERN(s_cursor, "cursor");
    INTERN(s_slots, "slots");
    INTERN(s_due, "due");
    INTERN(s_serves, "serves");
    INTERN(s_ticket, "ticket");
    INTERN(s_current, "allocated_bytes_current");
    INTERN(s_peak, "allocated_bytes_peak");
    INTERN(s_size, "size");
    INTERN(s_region, "region");
    INTERN(s_slot, "slot");
    INTERN(s_ptr, "ptr");
    INTERN(s_release, "release");
    INTERN(s_popleft, "popleft");
    INTERN(s_end_overdue, "end_overdue");
    INTERN(s_make_overdue, "make_overdue");
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "DONE", DONE) < 0 ||
        PyModule_AddIntConstant(m, "MISSED", MISSED) < 0 ||
        PyModule_AddIntConstant(m, "SLOW", SLOW) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
