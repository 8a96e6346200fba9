/* Attribute reads for cupool's C extensions, as the interpreter does them, faster for the
 * one class a loop meets: where `name` is a __slots__ member of the object's exact type (a
 * member descriptor holding an object), the value is read at the member's offset;
 * anything else (another type, a property, an unset slot) goes through PyObject_GetAttr.
 * A Member remembers the last type it saw (a strong reference, so that its address cannot
 * be reused by another type while the offset is kept). */
#ifndef CUPOOL_MEMBERS_H
#define CUPOOL_MEMBERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject **name;    /* the interned attribute name */
    PyTypeObject *type; /* the type `offset` was found for (a strong reference) */
    Py_ssize_t offset;  /* 0: not a plain object member of `type` */
} Member;

/* The offset of attribute `name` in instances of `type` where it is a __slots__ member
 * holding an object (a member descriptor), else 0: any other attribute, or none (no
 * error is left set). */
static inline Py_ssize_t member_offset(PyTypeObject *type, PyObject *name) {
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    if (descr == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t offset = 0;
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *def = ((PyMemberDescrObject *)descr)->d_member;
        if (def->type == T_OBJECT_EX && !(def->flags & READ_RESTRICTED)) offset = def->offset;
    }
    Py_DECREF(descr);
    return offset;
}

static inline PyObject *member_get(Member *m, PyObject *obj) {
    PyTypeObject *type = Py_TYPE(obj);
    if (type != m->type) {
        Py_INCREF(type);
        Py_XSETREF(m->type, type);
        m->offset = member_offset(type, *m->name);
    }
    if (m->offset > 0) {
        PyObject *value = *(PyObject **)((char *)obj + m->offset);
        if (value != NULL) return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, *m->name);
}

#endif
