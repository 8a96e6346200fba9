/* Declaring the recorded op again (cupool.program.iteration), compiled.
 *
 * again(iteration, fn, inputs, out, updates, name, recompute) is Iteration.op's first
 * branch: where op len(iteration._ops) of the recorded program has the same callable,
 * output spec (an equal out= tuple, or a tensor of the same layout: same_layout), name, kind, recompute flag and tensors (each one valid in this
 * iteration), the recorded op is appended to the iteration's ops and its output tensor
 * made and returned (None for an op without outputs). Anything else returns MISSED, and
 * the caller declares the op on the general path. Every comparison and every effect is
 * the one of the Python code (Iteration._again_py), in the same order; a tensor given
 * for a key not yet checked in this iteration goes through Iteration._valid_first.
 *
 * The recorded op's fields are read from its `fast` tuple (DeclaredOp.fast): fn,
 * raw_out, name, kind, recompute, inputs, updates, outputs, and the key, spec and name
 * of its first output (None where it has none).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_members.h"

static PyObject *MISSED, *s_ops, *s_recorded, *s_valid, *s_specs, *s_names, *s_session,
    *s_number, *s_state, *s_closed, *s_fast, *s_open, *s_op, *s_valid_first, *s_name_attr,
    *s_name_attr_plain, *s_empty, *s_spec, *s_shape, *s_dtype;

static Member m_ops = {&s_ops, NULL, 0}, m_recorded = {&s_recorded, NULL, 0},
              m_valid = {&s_valid, NULL, 0}, m_specs = {&s_specs, NULL, 0},
              m_names = {&s_names, NULL, 0}, m_session = {&s_session, NULL, 0},
              m_number = {&s_number, NULL, 0}, m_state = {&s_state, NULL, 0};

enum { F_FN, F_RAW_OUT, F_NAME, F_KIND, F_RECOMPUTE, F_INPUTS, F_UPDATES, F_OUTPUTS,
       F_KEY, F_SPEC, F_OUT_NAME, F_SIZE };

static PyObject *Tensor; /* cupool.program.tensors.Tensor, given by bind() */

/* Tensor's __slots__, in the order its __init__ takes their values: owner, key, spec,
 * name, iteration, then persistent (iteration is None) and released (False). bind()
 * finds each one's offset and checks, on a tensor of its own, that storing the values
 * there makes what Tensor(...) makes; where it does not (or a slot is missing), tensors
 * are made by calling the class. */
enum { T_OWNER, T_KEY, T_SPEC, T_NAME, T_ITERATION, T_PERSISTENT, T_RELEASED, T_SLOTS };
static const char *slot_names[T_SLOTS] = {"owner", "key", "spec", "name", "iteration",
                                           "persistent", "released"};
static Py_ssize_t slot_offsets[T_SLOTS];
static int direct; /* 1: tensors are made by storing their slots */

static void store(PyObject *obj, int slot, PyObject *value) {
    PyObject **at = (PyObject **)((char *)obj + slot_offsets[slot]);
    Py_XSETREF(*at, Py_NewRef(value));
}

/* Tensor(owner, key, spec, name, iteration), made directly where bind() allowed it. */
static PyObject *make_tensor(PyObject *owner, PyObject *key, PyObject *spec, PyObject *name,
                             PyObject *iteration) {
    if (!direct) {
        PyObject *args[5] = {owner, key, spec, name, iteration};
        return PyObject_Vectorcall(Tensor, args, 5, NULL);
    }
    PyTypeObject *type = (PyTypeObject *)Tensor;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) return NULL;
    store(obj, T_OWNER, owner);
    store(obj, T_KEY, key);
    store(obj, T_SPEC, spec);
    store(obj, T_NAME, name);
    store(obj, T_ITERATION, iteration);
    store(obj, T_PERSISTENT, iteration == Py_None ? Py_True : Py_False);
    store(obj, T_RELEASED, Py_False);
    return obj;
}

static PyObject *missed(void) { return Py_NewRef(MISSED); }

/* Iteration.same_layout: whether `out` (a Tensor whose layout out= copies) makes the one
 * output spec of `outputs`: the same shape and dtype, and no name of its own. */
static int same_layout(PyObject *out, PyObject *outputs) {
    if (PyTuple_GET_SIZE(outputs) != 1) return 0;
    PyObject *made = PyTuple_GET_ITEM(outputs, 0);
    PyObject *name = PyObject_GetAttr(made, s_name_attr_plain);
    if (name == NULL) return -1;
    int same = PyObject_RichCompareBool(name, s_empty, Py_EQ);
    Py_DECREF(name);
    if (same != 1) return same;
    PyObject *spec = PyObject_GetAttr(out, s_spec);
    if (spec == NULL) return -1;
    PyObject *names[2] = {s_shape, s_dtype};
    for (int i = 0; i < 2 && same == 1; i++) {
        PyObject *a = PyObject_GetAttr(spec, names[i]), *b = PyObject_GetAttr(made, names[i]);
        same = a == NULL || b == NULL ? -1 : PyObject_RichCompareBool(a, b, Py_EQ);
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
    Py_DECREF(spec);
    return same;
}

/* Whether each of `given` (a tuple or list) is the tensor valid for the same position of
 * `keys` (1), not (0), or an error (-1): valid.get(key) is tensor, else
 * iteration._valid_first(tensor, key). */
static int all_valid(PyObject *iteration, PyObject *valid, PyObject *given, PyObject *keys) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(given);
    PyObject **items = PySequence_Fast_ITEMS(given);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *key = PyTuple_GET_ITEM(keys, k), *tensor = items[k];
        PyObject *known = PyDict_GetItemWithError(valid, key);
        if (known == tensor) continue;
        if (known == NULL && PyErr_Occurred()) return -1;
        PyObject *args[3] = {iteration, tensor, key};
        PyObject *ok = PyObject_VectorcallMethod(s_valid_first, args, 3, NULL);
        if (ok == NULL) return -1;
        int truth = PyObject_IsTrue(ok);
        Py_DECREF(ok);
        if (truth != 1) return truth;
    }
    return 1;
}

static PyObject *again(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "again takes 7 arguments (%zd given)", nargs);
        return NULL;
    }
    if (Tensor == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "again: bind(Tensor) was not called");
        return NULL;
    }
    PyObject *iteration = args[0], *fn = args[1], *inputs = args[2], *out = args[3],
             *updates = args[4], *name = args[5], *recompute = args[6];
    if (!PyTuple_CheckExact(inputs) || !(PyTuple_CheckExact(updates) || PyList_CheckExact(updates)))
        return missed(); /* e.g. a generator of updates: the general path consumes it */
    PyObject *result = NULL, *ops = NULL, *recorded = NULL, *fast = NULL, *session = NULL,
             *state = NULL, *valid = NULL;
    /* a list of updates is read from a snapshot, as tuple(updates) reads it */
    PyObject *updates_seq = PyList_CheckExact(updates) ? PyList_AsTuple(updates)
                                                       : Py_NewRef(updates);
    if (updates_seq == NULL) return NULL;
    ops = member_get(&m_ops, iteration);
    recorded = member_get(&m_recorded, iteration);
    if (ops == NULL || recorded == NULL) goto done;
    if (!PyList_CheckExact(ops) || !PyTuple_CheckExact(recorded)) { result = missed(); goto done; }
    Py_ssize_t index = PyList_GET_SIZE(ops);
    if (index >= PyTuple_GET_SIZE(recorded)) { result = missed(); goto done; }
    PyObject *op = PyTuple_GET_ITEM(recorded, index);
    fast = PyObject_GetAttr(op, s_fast);
    if (fast == NULL) goto done;
    if (!PyTuple_CheckExact(fast) || PyTuple_GET_SIZE(fast) != F_SIZE) {
        PyErr_SetString(PyExc_TypeError, "again: DeclaredOp.fast is not the tuple it should be");
        goto done;
    }
#define F(i) PyTuple_GET_ITEM(fast, (i))
    if (F(F_FN) != fn) { result = missed(); goto done; }
    /* the output spec: (out is None and not outputs) if raw_out is None, else raw_out is
     * out or raw_out == out */
    PyObject *raw = F(F_RAW_OUT);
    int same;
    if (raw != Py_None) {
        if (raw == out) same = 1;
        else if ((same = PyObject_RichCompareBool(raw, out, Py_EQ)) < 0) goto done;
    } else if (out == Py_None) {
        same = PyTuple_GET_SIZE(F(F_OUTPUTS)) == 0;
    } else if ((PyObject *)Py_TYPE(out) == Tensor) {
        if ((same = same_layout(out, F(F_OUTPUTS))) < 0) goto done;
    } else {
        same = 0;
    }
    if (!same) { result = missed(); goto done; }
    /* the name: the given one, else the callable's */
    int named = PyObject_IsTrue(name);
    if (named < 0) goto done;
    if (named) {
        int eq = PyObject_RichCompareBool(name, F(F_NAME), Py_EQ);
        if (eq < 0) goto done;
        if (!eq) { result = missed(); goto done; }
    } else {
        PyObject *label = PyObject_GetAttr(F(F_FN), s_name_attr);
        if (label == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) goto done;
            PyErr_Clear();
        }
        int truthy = label != NULL ? PyObject_IsTrue(label) : 0;
        if (truthy < 0) { Py_DECREF(label); goto done; }
        if (!truthy) {
            Py_XSETREF(label, PyObject_GetAttr((PyObject *)Py_TYPE(F(F_FN)), s_name_attr));
            if (label == NULL) goto done;
        }
        int eq = PyObject_RichCompareBool(label, F(F_NAME), Py_EQ);
        Py_DECREF(label);
        if (eq < 0) goto done;
        if (!eq) { result = missed(); goto done; }
    }
    int kind = PyObject_RichCompareBool(F(F_KIND), s_op, Py_EQ);
    if (kind < 0) goto done;
    if (!kind) { result = missed(); goto done; }
    int flag = PyObject_IsTrue(recompute);
    if (flag < 0) goto done;
    if (F(F_RECOMPUTE) != (flag ? Py_True : Py_False) ||
        PyTuple_GET_SIZE(inputs) != PyTuple_GET_SIZE(F(F_INPUTS)) ||
        PySequence_Fast_GET_SIZE(updates_seq) != PyTuple_GET_SIZE(F(F_UPDATES))) {
        result = missed();
        goto done;
    }
    session = member_get(&m_session, iteration);
    if (session == NULL) goto done;
    PyObject *closed = PyObject_GetAttr(session, s_closed);
    if (closed == NULL) goto done;
    int is_closed = PyObject_IsTrue(closed);
    Py_DECREF(closed);
    if (is_closed < 0) goto done;
    state = member_get(&m_state, iteration);
    if (state == NULL) goto done;
    int open = PyObject_RichCompareBool(state, s_open, Py_EQ);
    if (open < 0) goto done;
    if (is_closed || !open) { result = missed(); goto done; }
    valid = member_get(&m_valid, iteration);
    if (valid == NULL) goto done;
    if (!PyDict_CheckExact(valid)) { result = missed(); goto done; }
    int ok = all_valid(iteration, valid, inputs, F(F_INPUTS));
    if (ok == 1 && PySequence_Fast_GET_SIZE(updates_seq))
        ok = all_valid(iteration, valid, updates_seq, F(F_UPDATES));
    if (ok < 0) goto done;
    if (!ok) { result = missed(); goto done; }
    if (PyList_Append(ops, op) < 0) goto done;
    PyObject *key = F(F_KEY);
    if (key == Py_None) { result = Py_NewRef(Py_None); goto done; }
    PyObject *specs = member_get(&m_specs, iteration);
    if (specs == NULL) goto done;
    int r = PyObject_SetItem(specs, key, F(F_SPEC));
    Py_DECREF(specs);
    if (r < 0) goto done;
    PyObject *names = member_get(&m_names, iteration);
    if (names == NULL) goto done;
    r = PyObject_SetItem(names, key, F(F_OUT_NAME));
    Py_DECREF(names);
    if (r < 0) goto done;
    PyObject *number = member_get(&m_number, iteration);
    if (number == NULL) goto done;
    PyObject *made = make_tensor(session, key, F(F_SPEC), F(F_OUT_NAME), number);
    Py_DECREF(number);
    if (made == NULL) goto done;
    if (PyDict_SetItem(valid, key, made) < 0) { Py_DECREF(made); goto done; }
    result = made;
#undef F
done:
    Py_DECREF(updates_seq);
    Py_XDECREF(valid);
    Py_XDECREF(state);
    Py_XDECREF(session);
    Py_XDECREF(fast);
    Py_XDECREF(recorded);
    Py_XDECREF(ops);
    return result;
}

/* Whether a tensor made by storing its slots equals one made by the class, slot by slot,
 * for two sets of values (one with iteration None); -1 on error. */
static int same_as_class(void) {
    int same = 1;
    for (int k = 0; k < 2 && same == 1; k++) {
        PyObject *v[5] = {PyUnicode_FromString("owner"), PyTuple_New(0), PyFloat_FromDouble(1.5),
                          PyUnicode_FromString("name"), k ? Py_NewRef(Py_None) : PyLong_FromLong(7)};
        for (int i = 0; i < 5; i++)
            if (v[i] == NULL) same = -1;
        PyObject *made = NULL, *called = NULL;
        if (same == 1) {
            direct = 1;
            made = make_tensor(v[0], v[1], v[2], v[3], v[4]);
            direct = 0;
            called = make_tensor(v[0], v[1], v[2], v[3], v[4]);
            if (made == NULL || called == NULL) same = -1;
        }
        for (int i = 0; i < T_SLOTS && same == 1; i++) {
            PyObject *a = PyObject_GetAttrString(made, slot_names[i]);
            PyObject *b = PyObject_GetAttrString(called, slot_names[i]);
            if (a == NULL || b == NULL) same = -1;
            else if (a != b) {
                int eq = PyObject_RichCompareBool(a, b, Py_EQ);
                same = eq < 0 ? -1 : eq;
            }
            Py_XDECREF(a);
            Py_XDECREF(b);
        }
        Py_XDECREF(made);
        Py_XDECREF(called);
        for (int i = 0; i < 5; i++) Py_XDECREF(v[i]);
    }
    return same;
}

static PyObject *bind(PyObject *self, PyObject *tensor) {
    (void)self;
    if (!PyType_Check(tensor)) {
        PyErr_SetString(PyExc_TypeError, "bind: Tensor must be a class");
        return NULL;
    }
    Py_XSETREF(Tensor, Py_NewRef(tensor));
    direct = 0;
    int found = 1;
    for (int i = 0; i < T_SLOTS && found; i++) {
        PyObject *name = PyUnicode_FromString(slot_names[i]);
        if (name == NULL) return NULL;
        slot_offsets[i] = member_offset((PyTypeObject *)tensor, name);
        Py_DECREF(name);
        found = slot_offsets[i] > 0;
    }
    if (found && ((PyTypeObject *)tensor)->tp_dictoffset == 0) {
        int same = same_as_class();
        if (same < 0) return NULL;
        direct = same;
    }
    return PyBool_FromLong(direct);
}

static PyMethodDef methods[] = {
    {"again", (PyCFunction)(void (*)(void))again, METH_FASTCALL,
     "again(iteration, fn, inputs, out, updates, name, recompute) -> the output tensor, "
     "None, or MISSED"},
    {"bind", bind, METH_O,
     "bind(Tensor): the class of the tensors again() makes; returns whether they are made "
     "by storing their slots (checked against the class) rather than by calling it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_declare",
                                    "Declaring the recorded op again, compiled.", -1, methods};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__declare(void) {
    INTERN(s_ops, "_ops");
    INTERN(s_recorded, "_recorded");
    INTERN(s_valid, "_valid");
    INTERN(s_specs, "_specs");
    INTERN(s_names, "_names");
    INTERN(s_session, "session");
    INTERN(s_number, "number");
    INTERN(s_state, "_state");
    INTERN(s_closed, "_closed");
    INTERN(s_fast, "fast");
    INTERN(s_open, "open");
    INTERN(s_op, "op");
    INTERN(s_valid_first, "_valid_first");
    INTERN(s_name_attr, "__name__");
    INTERN(s_name_attr_plain, "name");
    INTERN(s_empty, "");
    INTERN(s_spec, "spec");
    INTERN(s_shape, "shape");
    INTERN(s_dtype, "dtype");
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    MISSED = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    if (MISSED == NULL || PyModule_AddObjectRef(m, "MISSED", MISSED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
