/* The chain walk of cupool.planning.budget.engine.walks (walk_python), compiled.
 *
 * Tables(recipe_op, input_start, inputs, persistent, life_start, life_end, base_start,
 * base_end): what the walk reads of a trace, by buffer id (ids 0 .. len - 1; int64 arrays):
 * the op of a buffer's recipe (-1: none), its inputs (inputs[input_start[b] :
 * input_start[b + 1]], in recipe order), whether it is persistent (0/1), its lifetime
 * [life_start, life_end) and its base interval [base_start, base_end).
 *
 * Tables.walk(op_us, transient, holes, hole_index, hole_status, state, buffer_id, op,
 * max_chain) -> (swapped, cost_us, links, read): the walk over the inputs of `buffer_id`'s
 * recipe at `op`, step for step as walks.walk_python walks them (the same order of reads,
 * links, swapped inputs and additions, so the same floats and the same partial lists when
 * an input cannot be re-made: cost_us is then None). `op_us` is the list of op durations
 * (floats), `transient`, `holes` and `hole_index` the state's dicts by buffer id (the last
 * holding records.HoleIndex tuples); an input with holes is looked up in its HoleIndex
 * as HoleIndex.at does, or, where it has none yet, asks `hole_status(state, x, op)`
 * (which makes it): 0 resident at op, 1 away with no hole there, 2 in a swap hole, 3 in
 * a recompute hole, 4 in a hole of another kind. `read` holds every buffer
 * whose residency the walk read, once each, in the order first read.
 *
 * Tables.walk_into(walks, reading, <walk's arguments>) -> (swapped, cost_us, links): the
 * same walk, kept as PlanState._chain_walk keeps it: walks[(buffer_id, op)] = the walk,
 * and (buffer_id, op) added to the dict reading[x] for every buffer x read.
 *
 * tests/planning/test_chain_walk.py compares it with the pure-Python walk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../_int64_arg.h"

enum { RESIDENT = 0, AWAY = 1, IN_SWAP = 2, IN_RECOMPUTE = 3, IN_OTHER = 4 };

typedef struct {
    int64_t *items;
    Py_ssize_t len, cap;
} Vec;

static int vec_push(Vec *v, int64_t x) {
    if (v->len == v->cap) {
        Py_ssize_t cap = v->cap ? 2 * v->cap : 64;
        int64_t *items = realloc(v->items, (size_t)cap * sizeof(int64_t));
        if (!items) {
            PyErr_NoMemory();
            return -1;
        }
        v->items = items;
        v->cap = cap;
    }
    v->items[v->len++] = x;
    return 0;
}

typedef struct {
    PyObject_HEAD
    Py_ssize_t count; /* buffer ids 0 .. count - 1 */
    int64_t *recipe_op, *input_start, *inputs, *persistent;
    int64_t *life_start, *life_end, *base_start, *base_end;
    uint32_t *seen_mark, *read_mark; /* == stamp: in this walk's seen / read set */
    uint32_t stamp;
    Vec links, swapped, read; /* links as (buffer, depth) pairs */
} Tables;

typedef struct {
    Tables *t;
    PyObject *op_us, *transient, *holes, *hole_index, *hole_status, *state, *op_obj;
    int64_t op, max_chain;
} Walk;

static void tables_free_arrays(Tables *t) {
    int64_t **arrays[] = {&t->recipe_op, &t->input_start, &t->inputs, &t->persistent,
                          &t->life_start, &t->life_end, &t->base_start, &t->base_end};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) {
        free(*arrays[i]);
        *arrays[i] = NULL;
    }
    free(t->seen_mark);
    free(t->read_mark);
    t->seen_mark = t->read_mark = NULL;
    free(t->links.items);
    free(t->swapped.items);
    free(t->read.items);
    memset(&t->links, 0, sizeof(Vec));
    memset(&t->swapped, 0, sizeof(Vec));
    memset(&t->read, 0, sizeof(Vec));
}

static void tables_dealloc(Tables *t) {
    tables_free_arrays(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int64_t *copied(PyObject *obj, const char *name, Py_ssize_t *len) {
    Arg a = {0};
    if (get_int64(obj, &a, 0, name)) {
        if (a.held) PyBuffer_Release(&a.view);
        return NULL;
    }
    *len = a.view.len / 8;
    int64_t *out = malloc((size_t)(*len ? *len : 1) * sizeof(int64_t));
    if (!out) {
        PyBuffer_Release(&a.view);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(out, a.view.buf, (size_t)*len * sizeof(int64_t));
    PyBuffer_Release(&a.view);
    return out;
}

static int tables_init(Tables *t, PyObject *args, PyObject *kwds) {
    PyObject *o[8];
    static const char *names[8] = {"recipe_op", "input_start", "inputs", "persistent",
                                   "life_start", "life_end", "base_start", "base_end"};
    (void)kwds;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7]))
        return -1;
    tables_free_arrays(t);
    int64_t **arrays[8] = {&t->recipe_op, &t->input_start, &t->inputs, &t->persistent,
                           &t->life_start, &t->life_end, &t->base_start, &t->base_end};
    Py_ssize_t lens[8];
    for (int i = 0; i < 8; i++) {
        *arrays[i] = copied(o[i], names[i], &lens[i]);
        if (!*arrays[i]) return -1;
    }
    Py_ssize_t count = lens[0];
    if (lens[1] != count + 1 || lens[3] != count || lens[4] != count || lens[5] != count ||
        lens[6] != count || lens[7] != count) {
        PyErr_Format(PyExc_ValueError,
                     "Tables: every per-buffer array must hold %zd entries (input_start "
                     "%zd + 1), got %zd %zd %zd %zd %zd %zd %zd",
                     count, count, lens[0], lens[1], lens[3], lens[4], lens[5], lens[6],
                     lens[7]);
        return -1;
    }
    for (Py_ssize_t b = 0; b < count; b++) {
        int64_t lo = t->input_start[b], hi = t->input_start[b + 1];
        if (lo < 0 || hi < lo || hi > lens[2]) {
            PyErr_Format(PyExc_ValueError, "Tables: buffer %zd: inputs [%lld, %lld) outside "
                         "[0, %zd)", b, (long long)lo, (long long)hi, lens[2]);
            return -1;
        }
    }
    for (Py_ssize_t k = 0; k < lens[2]; k++) {
        if (t->inputs[k] < 0 || t->inputs[k] >= count) {
            PyErr_Format(PyExc_ValueError, "Tables: input %lld is no buffer id (0 .. %zd)",
                         (long long)t->inputs[k], count - 1);
            return -1;
        }
    }
    t->count = count;
    t->seen_mark = calloc((size_t)(count ? count : 1), sizeof(uint32_t));
    t->read_mark = calloc((size_t)(count ? count : 1), sizeof(uint32_t));
    if (!t->seen_mark || !t->read_mark) {
        PyErr_NoMemory();
        return -1;
    }
    t->stamp = 0;
    return 0;
}

static int64_t int_at(PyObject *seq, Py_ssize_t i, int *error) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) *error = 1;
    return v;
}

/* A field of a Hole (start, end, kind) as an int64. */
static int64_t hole_field(PyObject *hole, Py_ssize_t i, int *error) {
    if (!PyTuple_Check(hole) || PyTuple_GET_SIZE(hole) < 3) {
        PyErr_SetString(PyExc_TypeError, "a hole must be a (start, end, kind) tuple");
        *error = 1;
        return 0;
    }
    return int_at(hole, i, error);
}

/* hole_status from a buffer's HoleIndex (wrap, holes, starts, disjoint), as HoleIndex.at
 * and PlanState.resident read it; -1 on error. */
static int indexed_status(Tables *t, PyObject *index, int64_t x, int64_t op) {
    if (!PyTuple_Check(index) || PyTuple_GET_SIZE(index) < 4 ||
        !PyList_Check(PyTuple_GET_ITEM(index, 1)) || !PyList_Check(PyTuple_GET_ITEM(index, 2))) {
        PyErr_SetString(PyExc_TypeError, "a hole index must be (wrap, holes, starts, disjoint)");
        return -1;
    }
    PyObject *wrap = PyTuple_GET_ITEM(index, 0), *holes = PyTuple_GET_ITEM(index, 1);
    PyObject *starts = PyTuple_GET_ITEM(index, 2);
    int disjoint = PyObject_IsTrue(PyTuple_GET_ITEM(index, 3));
    if (disjoint < 0) return -1;
    int error = 0;
    PyObject *hole = NULL;
    Py_ssize_t n = PyList_GET_SIZE(holes);
    if (disjoint) { /* bisect_right(starts, op) - 1 */
        Py_ssize_t lo = 0, hi = PyList_GET_SIZE(starts);
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            int64_t start = int_at(starts, mid, &error);
            if (error) return -1;
            if (op < start) hi = mid;
            else lo = mid + 1;
        }
        Py_ssize_t k = lo - 1;
        if (k >= 0 && k < n) {
            PyObject *h = PyList_GET_ITEM(holes, k);
            int64_t end = hole_field(h, 1, &error);
            if (error) return -1;
            if (op < end) hole = h;
        }
    } else {
        for (Py_ssize_t k = 0; k < n && !hole; k++) {
            PyObject *h = PyList_GET_ITEM(holes, k);
            int64_t start = hole_field(h, 0, &error), end = hole_field(h, 1, &error);
            if (error) return -1;
            if (start <= op && op < end) hole = h;
        }
    }
    if (hole) {
        PyObject *kind = PyTuple_GET_ITEM(hole, 2);
        if (PyUnicode_Check(kind)) {
            if (PyUnicode_CompareWithASCIIString(kind, "swap") == 0) return IN_SWAP;
            if (PyUnicode_CompareWithASCIIString(kind, "recompute") == 0) return IN_RECOMPUTE;
        }
        return IN_OTHER;
    }
    int away;
    if (wrap != Py_None) {
        int64_t start = hole_field(wrap, 0, &error), end = hole_field(wrap, 1, &error);
        if (error) return -1;
        away = op >= start || op < end;
    } else {
        away = !(t->base_start[x] <= op && op < t->base_end[x]);
    }
    return away ? AWAY : RESIDENT;
}

/* Where input x is at the walk's op: RESIDENT, AWAY or the kind of its hole; -1 on error. */
static int status_of(Walk *w, int64_t x) {
    Tables *t = w->t;
    PyObject *key = PyLong_FromLongLong(x);
    if (!key) return -1;
    int code = -1;
    PyObject *ops = PyDict_GetItemWithError(w->transient, key); /* borrowed */
    if (ops) {
        int truth = PyObject_IsTrue(ops);
        if (truth < 0) goto done;
        if (truth) {
            int in = PySequence_Contains(ops, w->op_obj);
            if (in < 0) goto done;
            if (in) {
                code = RESIDENT;
                goto done;
            }
        }
    } else if (PyErr_Occurred()) {
        goto done;
    }
    PyObject *holes = PyDict_GetItemWithError(w->holes, key); /* borrowed */
    if (holes) {
        int truth = PyObject_IsTrue(holes);
        if (truth < 0) goto done;
        if (truth) {
            PyObject *index = PyDict_GetItemWithError(w->hole_index, key); /* borrowed */
            if (index) {
                code = indexed_status(t, index, x, w->op);
                goto done;
            }
            if (PyErr_Occurred()) goto done;
            PyObject *answer = PyObject_CallFunctionObjArgs(w->hole_status, w->state, key,
                                                            w->op_obj, NULL);
            if (!answer) goto done;
            long value = PyLong_AsLong(answer);
            Py_DECREF(answer);
            if (value == -1 && PyErr_Occurred()) goto done;
            if (value < RESIDENT || value > IN_OTHER) {
                PyErr_Format(PyExc_ValueError, "hole_status(state, %lld, %lld) = %ld: expected 0 .. 4",
                             (long long)x, (long long)w->op, value);
                goto done;
            }
            code = (int)value;
            goto done;
        }
    } else if (PyErr_Occurred()) {
        goto done;
    }
    code = (t->base_start[x] <= w->op && w->op < t->base_end[x]) ? RESIDENT : AWAY;
done:
    Py_DECREF(key);
    return code;
}

/* _chain_cost: 0 with *cost set, 1 when some input cannot be re-made (None), -1 on error. */
static int chain_cost(Walk *w, int64_t b, int64_t depth, double *cost) {
    Tables *t = w->t;
    int64_t recipe_op = t->recipe_op[b];
    if (recipe_op < 0 || depth > w->max_chain) return 1;
    if (recipe_op >= PyList_GET_SIZE(w->op_us)) {
        PyErr_Format(PyExc_IndexError, "buffer %lld: recipe op %lld outside op_us (%zd ops)",
                     (long long)b, (long long)recipe_op, PyList_GET_SIZE(w->op_us));
        return -1;
    }
    double total = PyFloat_AsDouble(PyList_GET_ITEM(w->op_us, recipe_op));
    if (total == -1.0 && PyErr_Occurred()) return -1;
    int64_t op = w->op;
    for (int64_t k = t->input_start[b]; k < t->input_start[b + 1]; k++) {
        int64_t x = t->inputs[k];
        if (t->read_mark[x] != t->stamp) {
            t->read_mark[x] = t->stamp;
            if (vec_push(&t->read, x)) return -1;
        }
        if (t->seen_mark[x] == t->stamp) continue;
        int code = status_of(w, x);
        if (code < 0) return -1;
        if (code == RESIDENT) continue;
        int persistent = t->persistent[x] != 0;
        if (!persistent && code == IN_SWAP) {
            t->seen_mark[x] = t->stamp;
            if (vec_push(&t->swapped, x)) return -1;
            continue;
        }
        if (persistent || op < t->life_start[x]) return 1;
        if (op < t->life_end[x] &&
            ((code != IN_RECOMPUTE && code != AWAY) || op < t->base_start[x]))
            return 1;
        double sub;
        int r = chain_cost(w, x, depth + 1, &sub);
        if (r) return r;
        t->seen_mark[x] = t->stamp;
        total += sub;
        if (vec_push(&t->links, x) || vec_push(&t->links, depth + 1)) return -1;
    }
    *cost = total;
    return 0;
}

static PyObject *ints_tuple(const int64_t *items, Py_ssize_t n) {
    PyObject *out = PyTuple_New(n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(items[i]);
        if (!v) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

/* Runs the walk of `args` (walk's arguments from `first` on): -1 on error, else 0 with
 * *none = 0 (cost in *cost) or 1 (cost_us None); the lists are left in t's vectors. */
static int run_walk(Tables *t, PyObject *args, Py_ssize_t first, int *none, double *cost,
                    long long *buffer_out, long long *op_out) {
    Walk w = {0};
    long long buffer_id, op, max_chain;
    w.t = t;
    PyObject *rest = PyTuple_GetSlice(args, first, PyTuple_GET_SIZE(args));
    if (!rest) return -1;
    int parsed = PyArg_ParseTuple(rest, "O!O!O!O!OOLLL", &PyList_Type, &w.op_us, &PyDict_Type,
                                  &w.transient, &PyDict_Type, &w.holes, &PyDict_Type,
                                  &w.hole_index, &w.hole_status, &w.state, &buffer_id, &op,
                                  &max_chain);
    Py_DECREF(rest);
    if (!parsed) return -1;
    if (buffer_id < 0 || buffer_id >= t->count) {
        PyErr_Format(PyExc_KeyError, "buffer %lld: no buffer id (0 .. %zd)", buffer_id,
                     t->count - 1);
        return -1;
    }
    w.op = op;
    w.max_chain = max_chain;
    w.op_obj = PyLong_FromLongLong(op);
    if (!w.op_obj) return -1;
    if (++t->stamp == 0) { /* wrapped: forget every mark */
        memset(t->seen_mark, 0, (size_t)t->count * sizeof(uint32_t));
        memset(t->read_mark, 0, (size_t)t->count * sizeof(uint32_t));
        t->stamp = 1;
    }
    t->links.len = t->swapped.len = t->read.len = 0;
    *cost = 0.0;
    int r = chain_cost(&w, buffer_id, 0, cost);
    Py_DECREF(w.op_obj);
    if (r < 0) return -1;
    *none = r;
    *buffer_out = buffer_id;
    *op_out = op;
    return 0;
}

/* (swapped, cost_us, links) of the walk just run, as a new tuple. */
static PyObject *walk_tuple(Tables *t, int none, double cost) {
    PyObject *swapped = ints_tuple(t->swapped.items, t->swapped.len);
    Py_ssize_t n_links = t->links.len / 2;
    PyObject *links = PyTuple_New(n_links);
    PyObject *cost_obj = none ? Py_NewRef(Py_None) : PyFloat_FromDouble(cost);
    PyObject *out = NULL;
    if (!swapped || !links || !cost_obj) goto done;
    for (Py_ssize_t i = 0; i < n_links; i++) {
        PyObject *pair = ints_tuple(t->links.items + 2 * i, 2);
        if (!pair) goto done;
        PyTuple_SET_ITEM(links, i, pair);
    }
    out = PyTuple_Pack(3, swapped, cost_obj, links);
done:
    Py_XDECREF(swapped);
    Py_XDECREF(links);
    Py_XDECREF(cost_obj);
    return out;
}

static PyObject *tables_walk(Tables *t, PyObject *args) {
    int none;
    double cost;
    long long buffer_id, op;
    if (run_walk(t, args, 0, &none, &cost, &buffer_id, &op)) return NULL;
    PyObject *walk = walk_tuple(t, none, cost);
    PyObject *read = ints_tuple(t->read.items, t->read.len);
    PyObject *out = NULL;
    if (walk && read)
        out = PyTuple_Pack(4, PyTuple_GET_ITEM(walk, 0), PyTuple_GET_ITEM(walk, 1),
                           PyTuple_GET_ITEM(walk, 2), read);
    Py_XDECREF(walk);
    Py_XDECREF(read);
    return out;
}

/* walk_into(walks, reading, <walk's arguments>): the walk kept as described above. */
static PyObject *tables_walk_into(Tables *t, PyObject *args) {
    if (PyTuple_GET_SIZE(args) < 2 || !PyDict_Check(PyTuple_GET_ITEM(args, 0)) ||
        !PyDict_Check(PyTuple_GET_ITEM(args, 1))) {
        PyErr_SetString(PyExc_TypeError, "walk_into(walks, reading, ...): two dicts first");
        return NULL;
    }
    PyObject *walks = PyTuple_GET_ITEM(args, 0), *reading = PyTuple_GET_ITEM(args, 1);
    int none;
    double cost;
    long long buffer_id, op;
    if (run_walk(t, args, 2, &none, &cost, &buffer_id, &op)) return NULL;
    PyObject *walk = walk_tuple(t, none, cost);
    if (!walk) return NULL;
    PyObject *key = Py_BuildValue("(LL)", buffer_id, op);
    if (!key || PyDict_SetItem(walks, key, walk) < 0) goto fail;
    for (Py_ssize_t i = 0; i < t->read.len; i++) {
        PyObject *x = PyLong_FromLongLong(t->read.items[i]);
        if (!x) goto fail;
        PyObject *keys = PyDict_GetItemWithError(reading, x); /* borrowed */
        int failed;
        if (keys) {
            failed = PyDict_SetItem(keys, key, Py_None) < 0;
        } else if (PyErr_Occurred()) {
            failed = 1;
        } else {
            PyObject *made = PyDict_New();
            failed = !made || PyDict_SetItem(made, key, Py_None) < 0 ||
                     PyDict_SetItem(reading, x, made) < 0;
            Py_XDECREF(made);
        }
        Py_DECREF(x);
        if (failed) goto fail;
    }
    Py_DECREF(key);
    return walk;
fail:
    Py_XDECREF(key);
    Py_DECREF(walk);
    return NULL;
}

static PyMethodDef tables_methods[] = {
    {"walk", (PyCFunction)tables_walk, METH_VARARGS,
     "walk(op_us, transient, holes, hole_index, hole_status, state, buffer_id, op, "
     "max_chain) -> (swapped, cost_us, links, read): walks.walk_python's walk (module "
     "comment)."},
    {"walk_into", (PyCFunction)tables_walk_into, METH_VARARGS,
     "walk_into(walks, reading, op_us, transient, holes, hole_index, hole_status, state, "
     "buffer_id, op, max_chain) -> (swapped, cost_us, links): the walk, kept in walks and "
     "its key in reading under each buffer it read."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TablesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cupool.planning.budget.engine._chainwalk.Tables",
    .tp_basicsize = sizeof(Tables),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What the chain walk reads of a trace, by buffer id (module comment).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)tables_init,
    .tp_dealloc = (destructor)tables_dealloc,
    .tp_methods = tables_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_chainwalk",
    .m_doc = "PlanState's chain walk over its inputs, compiled.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__chainwalk(void) {
    if (PyType_Ready(&TablesType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&TablesType);
    if (PyModule_AddObject(m, "Tables", (PyObject *)&TablesType) < 0) {
        Py_DECREF(&TablesType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
