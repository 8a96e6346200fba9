/* Integer attributes of many objects as int64 columns, for cupool.sim.replay_input (and
 * by_type, the objects split by their exact type: a plan's actions by kind).
 *
 * int_columns(objects, names) reads attribute names[c] of every object (a residency's
 * buffer_id, start, end, offset; an action's buffer_id and ops) into one bytearray holding
 * the columns one after the other, each len(objects) int64 values: what
 * numpy.fromiter(map(attrgetter(name), objects), numpy.int64) gives per name, without a
 * Python call per value. Where that could differ (an attribute that is not an int, one past
 * 64 bits, one missing) it returns None, and the caller reads the columns in Python, which
 * converts or raises as it always has. Objects whose class keeps the attribute in a
 * __slots__ member (the plan vocabulary's frozen dataclasses) are read from the slot, as
 * generic attribute lookup would read it, without the lookup.
 *
 * same(objects, name) tells whether one attribute is one object throughout; grouped(ops,
 * num_ops) sorts rows by op (a counting sort), as replay_input groups each kind of row.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* Where objects of one type keep attribute names[c]: the byte offset of its slot (a
 * __slots__ member: a dataclass with slots=True), or -1 to ask PyObject_GetAttr. A slot is
 * read directly only when the type's attribute is that member descriptor itself, which is
 * what PyObject_GetAttr would have read through. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t offsets[8];
} Slots;

static void find_slots(Slots *slots, PyTypeObject *type, PyObject *names, Py_ssize_t width) {
    slots->type = type;
    int generic = type->tp_getattro == PyObject_GenericGetAttr;
    for (Py_ssize_t c = 0; c < width; c++) {
        slots->offsets[c] = -1;
        if (c >= 8 || !generic) continue;
        PyObject *descr = PyObject_GetAttr((PyObject *)type, PyTuple_GET_ITEM(names, c));
        if (!descr) {
            PyErr_Clear();
            continue;
        }
        if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READ_RESTRICTED))
                slots->offsets[c] = member->offset;
        }
        Py_DECREF(descr);
    }
}

static PyObject *int_columns(PyObject *module, PyObject *args) {
    PyObject *objects, *names;
    if (!PyArg_ParseTuple(args, "OO!:int_columns", &objects, &PyTuple_Type, &names))
        return NULL;
    Py_ssize_t width = PyTuple_GET_SIZE(names);
    for (Py_ssize_t c = 0; c < width; c++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, c))) {
            PyErr_SetString(PyExc_TypeError, "int_columns: names must be strings");
            return NULL;
        }
    }
    PyObject *items = PySequence_Fast(objects, "int_columns: objects must be a sequence");
    if (!items) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject *block = PyByteArray_FromStringAndSize(NULL, count * width * 8);
    if (!block) {
        Py_DECREF(items);
        return NULL;
    }
    long long *out = (long long *)PyByteArray_AS_STRING(block);
    PyObject **objs = PySequence_Fast_ITEMS(items);
    Slots slots = {NULL, {0}};
    for (Py_ssize_t i = 0; i < count; i++) {
        PyTypeObject *type = Py_TYPE(objs[i]);
        if (type != slots.type) find_slots(&slots, type, names, width);
        for (Py_ssize_t c = 0; c < width; c++) {
            PyObject *value = NULL;
            Py_ssize_t at = c < 8 ? slots.offsets[c] : -1;
            if (at >= 0) {
                value = *(PyObject **)((char *)objs[i] + at);
                Py_XINCREF(value);  /* NULL: an unset slot, left to Python */
            } else {
                value = PyObject_GetAttr(objs[i], PyTuple_GET_ITEM(names, c));
            }
            int overflow = 0;
            long long number = -1;
            if (value && PyLong_Check(value))
                number = PyLong_AsLongLongAndOverflow(value, &overflow);
            int usable = value && PyLong_Check(value) && !overflow
                         && !(number == -1 && PyErr_Occurred());
            Py_XDECREF(value);
            if (!usable) {
                Py_DECREF(items);
                Py_DECREF(block);
                if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_MemoryError)) return NULL;
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            out[c * count + i] = number;
        }
    }
    Py_DECREF(items);
    return block;
}

/* by_type(objects, types): the objects split by exact type, one list per entry of the
 * tuple types (each list in the objects' order), or None when an object's type is none of
 * them: what appending each object to a dict of lists keyed by type(object) gives. */
static PyObject *by_type(PyObject *module, PyObject *args) {
    PyObject *objects, *types;
    if (!PyArg_ParseTuple(args, "OO!:by_type", &objects, &PyTuple_Type, &types))
        return NULL;
    Py_ssize_t kinds = PyTuple_GET_SIZE(types);
    PyObject *items = PySequence_Fast(objects, "by_type: objects must be a sequence");
    if (!items) return NULL;
    PyObject *out = PyTuple_New(kinds);
    if (!out) {
        Py_DECREF(items);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < kinds; k++) {
        PyObject *list = PyList_New(0);
        if (!list) goto fail;
        PyTuple_SET_ITEM(out, k, list);
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject **objs = PySequence_Fast_ITEMS(items);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *type = (PyObject *)Py_TYPE(objs[i]);
        Py_ssize_t k = 0;
        while (k < kinds && PyTuple_GET_ITEM(types, k) != type) k++;
        if (k == kinds) {
            Py_DECREF(items);
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (PyList_Append(PyTuple_GET_ITEM(out, k), objs[i]) < 0) goto fail;
    }
    Py_DECREF(items);
    return out;
fail:
    Py_DECREF(items);
    Py_DECREF(out);
    return NULL;
}

/* same(objects, name): (value,) when objects is not empty and attribute name of every
 * object is one and the same object (a plan's actions all at one host level), else None
 * (and the caller looks at the values in Python, which raises for a missing one). */
static PyObject *same(PyObject *module, PyObject *args) {
    PyObject *objects, *name;
    if (!PyArg_ParseTuple(args, "OU:same", &objects, &name)) return NULL;
    PyObject *items = PySequence_Fast(objects, "same: objects must be a sequence");
    if (!items) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject **objs = PySequence_Fast_ITEMS(items);
    PyObject *names = PyTuple_Pack(1, name);
    if (!names) {
        Py_DECREF(items);
        return NULL;
    }
    Slots slots = {NULL, {0}};
    PyObject *first = NULL;
    int one = count > 0;
    for (Py_ssize_t i = 0; one && i < count; i++) {
        PyTypeObject *type = Py_TYPE(objs[i]);
        if (type != slots.type) find_slots(&slots, type, names, 1);
        PyObject *value;
        if (slots.offsets[0] >= 0) {
            value = *(PyObject **)((char *)objs[i] + slots.offsets[0]);
            Py_XINCREF(value);
        } else {
            value = PyObject_GetAttr(objs[i], name);
        }
        if (!value) {
            one = 0;
            if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_MemoryError)) {
                Py_XDECREF(first);
                Py_DECREF(names);
                Py_DECREF(items);
                return NULL;
            }
            PyErr_Clear();
        } else if (!first) {
            first = value;
        } else {
            one = value == first;
            Py_DECREF(value);
        }
    }
    Py_DECREF(names);
    Py_DECREF(items);
    PyObject *result = one ? PyTuple_Pack(1, first) : Py_NewRef(Py_None);
    Py_XDECREF(first);
    return result;
}

/* grouped(ops, num_ops): the rows whose op (ops: a contiguous buffer of int64) is in
 * [0, num_ops), ordered by op and within an op by row (a counting sort), as a bytearray of
 * int64 row numbers, and first, num_ops + 1 int64 bounds (op i's rows are
 * rows[first[i]:first[i + 1]]): what a stable argsort of ops gives, cut to those ops. */
static PyObject *grouped(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t num_ops;
    if (!PyArg_ParseTuple(args, "y*n:grouped", &view, &num_ops)) return NULL;
    if (view.len % 8 || num_ops < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "grouped: ops must be int64 and num_ops >= 0");
        return NULL;
    }
    Py_ssize_t count = view.len / 8;
    const long long *ops = (const long long *)view.buf;
    PyObject *first_block = PyByteArray_FromStringAndSize(NULL, (num_ops + 1) * 8);
    if (!first_block) {
        PyBuffer_Release(&view);
        return NULL;
    }
    long long *first = (long long *)PyByteArray_AS_STRING(first_block);
    memset(first, 0, (size_t)(num_ops + 1) * 8);
    for (Py_ssize_t i = 0; i < count; i++)
        if (ops[i] >= 0 && ops[i] < num_ops) first[ops[i] + 1]++;
    for (Py_ssize_t i = 0; i < num_ops; i++) first[i + 1] += first[i];
    PyObject *rows_block = PyByteArray_FromStringAndSize(NULL, first[num_ops] * 8);
    long long *next = PyMem_Malloc(((size_t)num_ops + 1) * sizeof(long long));
    if (!rows_block || !next) {
        PyBuffer_Release(&view);
        Py_DECREF(first_block);
        Py_XDECREF(rows_block);
        PyMem_Free(next);
        return next ? NULL : PyErr_NoMemory();
    }
    long long *rows = (long long *)PyByteArray_AS_STRING(rows_block);
    memcpy(next, first, (size_t)(num_ops + 1) * sizeof(long long));
    for (Py_ssize_t i = 0; i < count; i++)
        if (ops[i] >= 0 && ops[i] < num_ops) rows[next[ops[i]]++] = i;
    PyMem_Free(next);
    PyBuffer_Release(&view);
    PyObject *result = PyTuple_Pack(2, rows_block, first_block);
    Py_DECREF(rows_block);
    Py_DECREF(first_block);
    return result;
}

static PyMethodDef methods[] = {
    {"grouped", grouped, METH_VARARGS,
     "grouped(ops, num_ops) -> (rows, first): bytearrays of int64, the rows whose op is in "
     "[0, num_ops) ordered by op (stable), and num_ops + 1 bounds per op."},
    {"same", same, METH_VARARGS,
     "same(objects, name) -> (value,) when every object's attribute name is one and the "
     "same object, else None."},
    {"by_type", by_type, METH_VARARGS,
     "by_type(objects, types) -> tuple of one list per type (the objects of exactly that "
     "type, in order), or None when an object is of another type."},
    {"int_columns", int_columns, METH_VARARGS,
     "int_columns(objects, names) -> bytearray of len(names) int64 columns of "
     "len(objects) values each (attribute names[c] of every object), or None where Python "
     "should read them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns",
    "Integer attributes of many objects as int64 columns (cupool.sim.replay_input).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
