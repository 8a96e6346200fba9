/* The flat replay of cupool.sim.timeline (python_replay), compiled.
 *
 * replay(data, num_ops, engines, d2h, h2d) runs the same loop over the same input (a
 * ReplayInput: NumPy columns grouped by op) and returns the six lists of a Timeline
 * (op_times, copies, recomputes, recompute_us, waited, held_after), equal to Python's
 * element for element, every float bit for bit:
 *
 *   - every time is computed by the same double operations in the same order (now + x,
 *     now - dispatch; built without fused multiply-add);
 *   - the heap is heapq's (the same sift-down on push and sift-up on pop) over the same
 *     key (time, priority, seq), with seq counting the pushes as Python's counter does, so
 *     entries pop in the same order, ties included;
 *   - lists Python keeps (the D2H copies still reading bytes, sorted by offset; the
 *     waiters of each copy; the copies queued per direction) are arrays kept in the same
 *     order, and the dicts (landed swap-ins by (buffer, trigger op), the last copy out of
 *     each buffer) are hash tables giving what the dicts give. A due swap-in that has not
 *     landed raises the KeyError Python's dict raises.
 *
 * With columns=True it returns the times alone, as doubles (what the search for a faster
 * plan compares, without a Python object per op or copy): op_times as bytes of
 * (dispatch, start, end) per op, copies as bytes of (start, end) per copy in completion
 * order, and held_after None.
 *
 * It returns None (and Python runs the loop) for an input it does not model exactly: a
 * NaN duration (Python orders the heap's tuples by identity as well as by value there),
 * engines or offsets out of the 64-bit range the loop computes in.
 */
#include "_timeline.h"

typedef struct {
    Py_ssize_t num_ops;
    Column col[COLUMNS];
    double *op_us;
    long long widest;
    Copy *copies;
    Py_ssize_t ins; /* copies [0, ins) are swap-ins by row, then the copies out by row */
    Vec wait_pool, waiters, links, queued[2], cwaits;
    Heap heap;
    long long idle[2];    /* idle engines per direction */
    Py_ssize_t taken[2];  /* of the copies queued per direction, how many an engine took */
    Pending pending;
    Table landed, last_out;
    /* records */
    Vec op_times;    /* (dispatch, start, end) per op */
    Vec ended;       /* (copy, end time) in completion order */
    Vec recomputed;  /* (row, op, begun, end) */
    Vec waited;      /* doubles */
    Vec held_after;  /* copies out, in issue order */
} Replay;

typedef struct { Py_ssize_t copy; double end; } Ended;
typedef struct { Py_ssize_t row, op; double begun, end; } Recomputed;

/* Python's _reading: append to `into` the copies of pending still reading [low, high) */
static int reading(Replay *r, Vec *into, long long low, long long high) {
    Pending *p = &r->pending;
    Py_ssize_t top = bisect(p->lows, 0, p->n, high, 0);
    Py_ssize_t bottom = bisect(p->lows, 0, top, low - r->widest + 1, 0);
    for (Py_ssize_t k = bottom; k < top; k++) {
        if (low < p->highs[k] && !r->copies[p->copies[k]].is_done) {
            Py_ssize_t *slot = vec_push(into);
            if (!slot) return -1;
            *slot = p->copies[k];
        }
    }
    return 0;
}

static int add_waiter(Replay *r, Py_ssize_t copy, Py_ssize_t waiter) {
    Link *link = vec_push(&r->links);
    if (!link) return -1;
    Py_ssize_t k = r->links.n - 1;
    link->waiter = waiter;
    link->next = -1;
    Copy *c = &r->copies[copy];
    if (c->last_link < 0) c->first_link = k;
    else AT(r->links, Link, c->last_link).next = k;
    c->last_link = k;
    return 0;
}

static Py_ssize_t new_waiter(Replay *r, Py_ssize_t left, Py_ssize_t copy) {
    Waiter *w = vec_push(&r->waiters);
    if (!w) return -1;
    w->left = left;
    w->copy = copy;
    return r->waiters.n - 1;
}

static void compact_pending(Replay *r) {
    Pending *p = &r->pending;
    Py_ssize_t kept = 0;
    for (Py_ssize_t k = 0; k < p->n; k++) {
        if (r->copies[p->copies[k]].is_done) continue;
        p->lows[kept] = p->lows[k];
        p->highs[kept] = p->highs[k];
        p->copies[kept] = p->copies[k];
        kept++;
    }
    p->n = kept;
    p->dead = 0;
}

static int hand_over(Replay *r, Py_ssize_t copy, double now) {
    Copy *c = &r->copies[copy];
    c->enqueued = now;
    int direction = c->direction;
    if (r->idle[direction]) {
        r->idle[direction] -= 1;
        return heap_push(&r->heap, now, URGENT, TAKEN, copy);
    }
    Py_ssize_t *slot = vec_push(&r->queued[direction]);
    if (!slot) return -1;
    *slot = copy;
    return 0;
}

#define TRY(x) do { if ((x) < 0) return -1; } while (0)

static int push_index(Vec *v, Py_ssize_t value) {
    Py_ssize_t *slot = vec_push(v);
    if (!slot) return -1;
    *slot = value;
    return 0;
}

static void new_copy(Copy *c, long long buffer_id, int direction, long long nbytes,
                     double copy_us) {
    c->buffer_id = buffer_id;
    c->direction = direction;
    c->nbytes = nbytes;
    c->copy_us = copy_us;
    c->enqueued = c->started = c->done = 0.0;
    c->is_done = 0;
    c->waits = c->nwaits = 0;
    c->first_link = c->last_link = -1;
    c->residency = -1;
}

/* Python's python_replay, step for step */
static int run(Replay *r) {
    const long long *in_first = LL(r->col[IN_FIRST]), *in_ids = LL(r->col[IN_IDS]),
                    *in_lows = LL(r->col[IN_LOWS]), *in_highs = LL(r->col[IN_HIGHS]),
                    *in_nbytes = LL(r->col[IN_NBYTES]), *in_triggers = LL(r->col[IN_TRIGGERS]);
    const double *in_us = DBL(r->col[IN_US]);
    const long long *due_first = LL(r->col[DUE_FIRST]), *due_ids = LL(r->col[DUE_IDS]),
                    *due_triggers = LL(r->col[DUE_TRIGGERS]);
    const long long *rc_first = LL(r->col[RC_FIRST]);
    const double *rc_us = DBL(r->col[RC_US]);
    const long long *out_first = LL(r->col[OUT_FIRST]), *out_ids = LL(r->col[OUT_IDS]),
                    *out_residencies = LL(r->col[OUT_RESIDENCIES]),
                    *out_nbytes = LL(r->col[OUT_NBYTES]), *out_lows = LL(r->col[OUT_LOWS]),
                    *out_highs = LL(r->col[OUT_HIGHS]);
    const double *out_us = DBL(r->col[OUT_US]);
    const long long *filled_first = LL(r->col[FILLED_FIRST]),
                    *filled_lows = LL(r->col[FILLED_LOWS]),
                    *filled_highs = LL(r->col[FILLED_HIGHS]);
    const double *op_us = r->op_us;
    Pending *p = &r->pending;
    Copy *copies = r->copies;
    Py_ssize_t num_ops = r->num_ops;
    double now = 0.0, dispatch = 0.0, start = 0.0, begun = 0.0, until;
    Py_ssize_t i = 0, j = 0, steps_end = 0;
    int stage = num_ops ? DISPATCH : IDLE;

    for (;;) {
        while (stage != IDLE) { /* the compute stream runs until it waits */
            if (stage == DISPATCH) {
                dispatch = now;
                if (p->dead && 2 * p->dead >= p->n) compact_pending(r);
                for (Py_ssize_t k = in_first[i]; k < in_first[i + 1]; k++) {
                    Py_ssize_t waits = r->wait_pool.n;
                    if (p->n) TRY(reading(r, &r->wait_pool, in_lows[k], in_highs[k]));
                    Py_ssize_t own = table_get(&r->last_out, in_ids[k], 0);
                    if (own >= 0 && !copies[own].is_done) TRY(push_index(&r->wait_pool, own));
                    Copy *c = &copies[k];
                    new_copy(c, in_ids[k], H2D, in_nbytes[k], in_us[k]);
                    c->waits = waits;
                    c->nwaits = r->wait_pool.n - waits;
                    TRY(heap_push(&r->heap, now, URGENT, HAND_OVER, k));
                    table_set(&r->landed, in_ids[k], in_triggers[k], k);
                }
                Vec *waits = &r->cwaits;
                waits->n = 0;
                for (Py_ssize_t d = due_first[i]; d < due_first[i + 1]; d++) {
                    Py_ssize_t landed = table_get(&r->landed, due_ids[d], due_triggers[d]);
                    if (landed < 0) { /* Python's landed[key]: KeyError(key) */
                        PyObject *error = Py_BuildValue("((LL))", due_ids[d], due_triggers[d]);
                        if (error) {
                            PyErr_SetObject(PyExc_KeyError, error);
                            Py_DECREF(error);
                        }
                        return -1;
                    }
                    TRY(push_index(waits, landed));
                }
                if (p->n) {
                    for (Py_ssize_t k = filled_first[i]; k < filled_first[i + 1]; k++) {
                        long long low = filled_lows[k];
                        Py_ssize_t top = bisect(p->lows, 0, p->n, low - r->widest + 1, 0);
                        if (top < p->n && p->lows[top] < filled_highs[k])
                            TRY(reading(r, waits, low, filled_highs[k]));
                    }
                }
                j = rc_first[i];
                steps_end = rc_first[i + 1];
                if (waits->n) {
                    Py_ssize_t *w = (Py_ssize_t *)waits->items, left = 0;
                    for (Py_ssize_t k = 0; k < waits->n; k++)
                        if (!copies[w[k]].is_done) w[left++] = w[k];
                    waits->n = left;
                    if (left) {
                        Py_ssize_t waiter = new_waiter(r, left, -1);
                        TRY(waiter);
                        for (Py_ssize_t k = 0; k < left; k++) TRY(add_waiter(r, w[k], waiter));
                        stage = IDLE;
                        break;
                    }
                }
                stage = NEXT_STEP;
            } else if (stage == RAN) {
                double *times = vec_push(&r->op_times);
                if (!times) return -1;
                times[0] = dispatch;
                times[1] = start;
                times[2] = now;
                for (Py_ssize_t m = out_first[i]; m < out_first[i + 1]; m++) {
                    Py_ssize_t slot = r->ins + m;
                    Copy *c = &copies[slot];
                    new_copy(c, out_ids[m], D2H, out_nbytes[m], out_us[m]);
                    c->residency = (Py_ssize_t)out_residencies[m];
                    TRY(heap_push(&r->heap, now, URGENT, HAND_OVER, slot));
                    Py_ssize_t k = bisect(p->lows, 0, p->n, out_lows[m], 1);
                    size_t behind = (size_t)(p->n - k);
                    memmove(p->lows + k + 1, p->lows + k, behind * sizeof(long long));
                    memmove(p->highs + k + 1, p->highs + k, behind * sizeof(long long));
                    memmove(p->copies + k + 1, p->copies + k, behind * sizeof(Py_ssize_t));
                    p->lows[k] = out_lows[m];
                    p->highs[k] = out_highs[m];
                    p->copies[k] = slot;
                    p->n++;
                    table_set(&r->last_out, out_ids[m], 0, slot);
                    TRY(push_index(&r->held_after, slot));
                }
                i++;
                stage = i < num_ops ? DISPATCH : IDLE;
                continue;
            } else if (stage == WAITED_DONE) {
                double *w = vec_push(&r->waited);
                if (!w) return -1;
                *w = now - dispatch;
                stage = NEXT_STEP;
            } else if (stage == RECOMPUTED) {
                Recomputed *rec = vec_push(&r->recomputed);
                if (!rec) return -1;
                rec->row = j;
                rec->op = i;
                rec->begun = begun;
                rec->end = now;
                j++;
                stage = NEXT_STEP;
            }
            if (stage == NEXT_STEP) {
                if (j < steps_end) {
                    begun = now;
                    until = now + rc_us[j];
                    stage = RECOMPUTED;
                } else {
                    start = now;
                    until = now + op_us[i];
                    stage = RAN;
                }
                if (r->heap.heap.n && AT(r->heap.heap, Entry, 0).time <= until) {
                    TRY(heap_push(&r->heap, until, NORMAL, COMPUTE, stage));
                    stage = IDLE;
                } else {
                    now = until; /* nothing else is due first: the timeout is the next event */
                }
            }
        }
        if (!r->heap.heap.n) break;
        Entry e = heap_pop(&r->heap);
        now = e.time;
        Py_ssize_t copy = e.subject;
        if (e.kind == TAKEN) {
            copies[copy].started = now;
            TRY(heap_push(&r->heap, now + copies[copy].copy_us, NORMAL, ENDED, copy));
            continue;
        }
        if (e.kind == ENDED) {
            Ended *ended = vec_push(&r->ended);
            if (!ended) return -1;
            ended->copy = copy;
            ended->end = now;
            TRY(heap_push(&r->heap, now, NORMAL, COMPLETED, copy));
            int direction = copies[copy].direction;
            Vec *waiting = &r->queued[direction];
            Py_ssize_t head = r->taken[direction];
            if (head < waiting->n) {
                r->taken[direction] = head + 1;
                TRY(heap_push(&r->heap, now, URGENT, TAKEN, AT(*waiting, Py_ssize_t, head)));
            } else {
                r->idle[direction] += 1;
            }
            continue;
        }
        if (e.kind == COMPLETED) {
            Copy *c = &copies[copy];
            c->done = now;
            c->is_done = 1;
            if (c->direction == D2H) p->dead += 1;
            for (Py_ssize_t k = c->first_link; k >= 0; k = AT(r->links, Link, k).next) {
                Py_ssize_t waiter = AT(r->links, Link, k).waiter;
                Waiter *w = &AT(r->waiters, Waiter, waiter);
                w->left -= 1;
                if (!w->left) TRY(heap_push(&r->heap, now, URGENT, WAITED, waiter));
            }
            continue;
        }
        if (e.kind == COMPUTE) {
            stage = (int)e.subject;
            continue;
        }
        if (e.kind == HAND_OVER) {
            Copy *c = &copies[copy];
            if (c->nwaits) {
                Py_ssize_t waiter = new_waiter(r, 0, copy);
                TRY(waiter);
                for (Py_ssize_t k = 0; k < c->nwaits; k++) {
                    Py_ssize_t other = AT(r->wait_pool, Py_ssize_t, c->waits + k);
                    if (!copies[other].is_done) {
                        AT(r->waiters, Waiter, waiter).left += 1;
                        TRY(add_waiter(r, other, waiter));
                    }
                }
                if (!AT(r->waiters, Waiter, waiter).left)
                    TRY(heap_push(&r->heap, now, URGENT, WAITED, waiter));
                continue;
            }
        } else { /* WAITED */
            copy = AT(r->waiters, Waiter, e.subject).copy;
            if (copy < 0) { /* the compute stream's waits are over */
                stage = WAITED_DONE;
                continue;
            }
        }
        TRY(hand_over(r, copy, now));
    }
    return 0;
}

static PyObject *float_tuple(int count, const double *values) {
    PyObject *tuple = PyTuple_New(count);
    if (!tuple) return NULL;
    for (int k = 0; k < count; k++) {
        PyObject *value = PyFloat_FromDouble(values[k]);
        if (!value) { Py_DECREF(tuple); return NULL; }
        PyTuple_SET_ITEM(tuple, k, value);
    }
    return tuple;
}

/* the six lists of a Timeline from what run() recorded. The records of op times, copies
 * and recomputes hold numbers and the direction strings only, so they cannot be part of a
 * reference cycle: they are taken off the garbage collector's lists when made (as its
 * first pass over them would do), which spares every later collection a pass over the
 * tens of thousands of records a replay of a large plan makes. */
static PyObject *records(Replay *r, PyObject *residencies, PyObject *d2h, PyObject *h2d,
                         int columns) {
    PyObject *op_times, *copies, *held_after;
    if (columns) {  /* the times as doubles: (dispatch, start, end) per op, (start, end)
                     * per copy in completion order; no held_after */
        op_times = PyBytes_FromStringAndSize((const char *)r->op_times.items,
                                             r->op_times.n * 3 * (Py_ssize_t)sizeof(double));
        copies = PyBytes_FromStringAndSize(NULL, r->ended.n * 2 * (Py_ssize_t)sizeof(double));
        if (copies) {
            double *spans = (double *)PyBytes_AS_STRING(copies);
            for (Py_ssize_t k = 0; k < r->ended.n; k++) {
                Ended ended = AT(r->ended, Ended, k);
                spans[2 * k] = r->copies[ended.copy].started;
                spans[2 * k + 1] = ended.end;
            }
        }
        held_after = Py_NewRef(Py_None);
    } else {
        op_times = PyList_New(r->op_times.n);
        copies = PyList_New(r->ended.n);
        held_after = PyList_New(r->held_after.n);
    }
    PyObject *recomputes = PyList_New(r->recomputed.n);
    PyObject *recompute_us = PyList_New(r->recomputed.n);
    PyObject *waited = PyList_New(r->waited.n);
    PyObject *result = NULL;
    if (!op_times || !copies || !recomputes || !recompute_us || !waited || !held_after)
        goto done;
    for (Py_ssize_t k = 0; !columns && k < r->op_times.n; k++) {
        PyObject *times = float_tuple(3, (const double *)r->op_times.items + 3 * k);
        if (!times) goto done;
        PyObject_GC_UnTrack(times);
        PyList_SET_ITEM(op_times, k, times);
    }
    for (Py_ssize_t k = 0; !columns && k < r->ended.n; k++) {
        Ended ended = AT(r->ended, Ended, k);
        const Copy *c = &r->copies[ended.copy];
        PyObject *record = PyTuple_New(6);
        if (!record) goto done;
        PyList_SET_ITEM(copies, k, record);
        PyObject *direction = c->direction == D2H ? d2h : h2d;
        Py_INCREF(direction);
        PyTuple_SET_ITEM(record, 1, direction);
        PyObject *items[] = {PyLong_FromLongLong(c->buffer_id), PyLong_FromLongLong(c->nbytes),
                             PyFloat_FromDouble(c->enqueued), PyFloat_FromDouble(c->started),
                             PyFloat_FromDouble(ended.end)};
        static const int at[] = {0, 2, 3, 4, 5};
        int failed = 0;
        for (int m = 0; m < 5; m++) {
            if (!items[m]) failed = 1;
            else PyTuple_SET_ITEM(record, at[m], items[m]);
        }
        if (failed) goto done;
        PyObject_GC_UnTrack(record);
    }
    const long long *rc_ids = LL(r->col[RC_IDS]);
    const double *rc_us = DBL(r->col[RC_US]);
    for (Py_ssize_t k = 0; k < r->recomputed.n; k++) {
        Recomputed rec = AT(r->recomputed, Recomputed, k);
        PyObject *record = Py_BuildValue("(Lndd)", rc_ids[rec.row], rec.op, rec.begun, rec.end);
        if (!record) goto done;
        PyObject_GC_UnTrack(record);
        PyList_SET_ITEM(recomputes, k, record);
        PyObject *us = PyFloat_FromDouble(rc_us[rec.row]);
        if (!us) goto done;
        PyList_SET_ITEM(recompute_us, k, us);
    }
    for (Py_ssize_t k = 0; k < r->waited.n; k++) {
        PyObject *us = PyFloat_FromDouble(AT(r->waited, double, k));
        if (!us) goto done;
        PyList_SET_ITEM(waited, k, us);
    }
    for (Py_ssize_t k = 0; !columns && k < r->held_after.n; k++) {
        const Copy *c = &r->copies[AT(r->held_after, Py_ssize_t, k)];
        PyObject *residency = PySequence_GetItem(residencies, c->residency);
        if (!residency) goto done;
        PyObject *record = c->is_done ? Py_BuildValue("(Nd)", residency, c->done)
                                      : Py_BuildValue("(NO)", residency, Py_None);
        if (!record) goto done;
        PyList_SET_ITEM(held_after, k, record);
    }
    result = PyTuple_Pack(6, op_times, copies, recomputes, recompute_us, waited, held_after);
done:
    Py_XDECREF(op_times);
    Py_XDECREF(copies);
    Py_XDECREF(recomputes);
    Py_XDECREF(recompute_us);
    Py_XDECREF(waited);
    Py_XDECREF(held_after);
    return result;
}

/* Reads the input into r; 1: ready, 0: an input left to Python, -1: an error */
static int prepare(Replay *r, PyObject *data, PyObject *residencies) {
    for (int k = 0; k < COLUMNS; k++) {
        PyObject *group = PyObject_GetAttrString(data, COLUMN_NAMES[k].group);
        if (!group) return -1;
        int failed = column_get(group, COLUMN_NAMES[k].name, COLUMN_NAMES[k].type, &r->col[k]);
        Py_DECREF(group);
        if (failed) return -1;
    }
    static const int groups[][2] = {{IN_FIRST, IN_TRIGGERS}, {DUE_FIRST, DUE_TRIGGERS},
                                    {RC_FIRST, RC_US}, {OUT_FIRST, OUT_HIGHS},
                                    {FILLED_FIRST, FILLED_HIGHS}};
    for (int g = 0; g < 5; g++) {
        Py_ssize_t rows = r->col[groups[g][0] + 1].n;
        for (int k = groups[g][0] + 1; k <= groups[g][1]; k++) {
            if (r->col[k].n != rows) {
                PyErr_Format(PyExc_ValueError, "replay input %s: columns of unequal length",
                             COLUMN_NAMES[k].group);
                return -1;
            }
        }
        if (!grouping_ok(&r->col[groups[g][0]], r->num_ops, rows)) {
            PyErr_Format(PyExc_ValueError, "replay input %s: first does not group %zd rows "
                         "by %zd ops", COLUMN_NAMES[groups[g][0]].group, rows, r->num_ops);
            return -1;
        }
    }
    Py_ssize_t count = PySequence_Length(residencies);
    if (count < 0) return -1;
    const long long *leaving = LL(r->col[OUT_RESIDENCIES]);
    for (Py_ssize_t m = 0; m < r->col[OUT_RESIDENCIES].n; m++) {
        if (leaving[m] < 0 || leaving[m] >= count) {
            PyErr_Format(PyExc_ValueError, "replay input swap_outs: residency %lld of %zd",
                         leaving[m], count);
            return -1;
        }
    }
    static const int times[] = {IN_US, RC_US, OUT_US};
    for (int k = 0; k < 3; k++)
        if (any_nan(&r->col[times[k]])) return 0;
    static const int offsets[] = {IN_LOWS, IN_HIGHS, OUT_LOWS, OUT_HIGHS, FILLED_LOWS,
                                  FILLED_HIGHS};
    for (int k = 0; k < 6; k++)
        if (!within_bound(&r->col[offsets[k]])) return 0;
    if (r->widest < 0 || r->widest >= BOUND) return 0;
    r->ins = r->col[IN_IDS].n;
    Py_ssize_t outs = r->col[OUT_IDS].n;
    r->copies = PyMem_Calloc((size_t)(r->ins + outs) + 1, sizeof(Copy));
    r->pending.lows = PyMem_Malloc(((size_t)outs + 1) * sizeof(long long));
    r->pending.highs = PyMem_Malloc(((size_t)outs + 1) * sizeof(long long));
    r->pending.copies = PyMem_Malloc(((size_t)outs + 1) * sizeof(Py_ssize_t));
    if (!r->copies || !r->pending.lows || !r->pending.highs || !r->pending.copies) {
        PyErr_NoMemory();
        return -1;
    }
    if (table_init(&r->landed, r->ins) || table_init(&r->last_out, outs)) return -1;
    return 1;
}

static void release(Replay *r) {
    for (int k = 0; k < COLUMNS; k++)
        if (r->col[k].held) PyBuffer_Release(&r->col[k].view);
    PyMem_Free(r->op_us);
    PyMem_Free(r->copies);
    Vec *vecs[] = {&r->wait_pool, &r->waiters, &r->links, &r->queued[0], &r->queued[1],
                   &r->cwaits, &r->heap.heap, &r->op_times, &r->ended, &r->recomputed,
                   &r->waited, &r->held_after};
    for (size_t k = 0; k < sizeof(vecs) / sizeof(vecs[0]); k++) PyMem_Free(vecs[k]->items);
    PyMem_Free(r->pending.lows);
    PyMem_Free(r->pending.highs);
    PyMem_Free(r->pending.copies);
    table_free(&r->landed);
    table_free(&r->last_out);
}

/* the op durations as doubles; 1: read, 0: one Python would add differently (NaN, not a
 * number), -1: an error */
static int read_op_us(Replay *r, PyObject *op_us) {
    PyObject *items = PySequence_Fast(op_us, "replay input op_us must be a sequence");
    if (!items) return -1;
    int status = 1;
    if (PySequence_Fast_GET_SIZE(items) < r->num_ops) status = 0;
    r->op_us = PyMem_Malloc(((size_t)r->num_ops + 1) * sizeof(double));
    if (!r->op_us) { PyErr_NoMemory(); status = -1; }
    for (Py_ssize_t i = 0; status == 1 && i < r->num_ops; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(items, i);
        if (!PyFloat_Check(item) && !PyLong_Check(item)) { status = 0; break; }
        double value = PyFloat_AsDouble(item);
        if (value == -1.0 && PyErr_Occurred()) { PyErr_Clear(); status = 0; break; }
        if (isnan(value)) status = 0;
        r->op_us[i] = value;
    }
    Py_DECREF(items);
    return status;
}

static PyObject *replay(PyObject *module, PyObject *args) {
    PyObject *data, *num_ops_obj, *engines_obj, *d2h, *h2d;
    int columns = 0;
    if (!PyArg_ParseTuple(args, "OOOOO|p:replay", &data, &num_ops_obj, &engines_obj, &d2h, &h2d,
                          &columns))
        return NULL;
    if (!PyLong_Check(num_ops_obj) || !PyLong_Check(engines_obj)) Py_RETURN_NONE;
    int overflow;
    long long engines = PyLong_AsLongLongAndOverflow(engines_obj, &overflow);
    if (engines == -1 && PyErr_Occurred()) return NULL;
    if (overflow || engines <= -BOUND || engines >= BOUND) Py_RETURN_NONE;
    Py_ssize_t num_ops = PyLong_AsSsize_t(num_ops_obj);
    if (num_ops == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (num_ops < 0) Py_RETURN_NONE;
    Replay r;
    memset(&r, 0, sizeof(r));
    Vec empty[] = {VEC(Py_ssize_t), VEC(Waiter), VEC(Link), VEC(double[3]), VEC(Ended),
                   VEC(Recomputed), VEC(double), VEC(Entry)};
    r.wait_pool = r.queued[0] = r.queued[1] = r.cwaits = r.held_after = empty[0];
    r.waiters = empty[1];
    r.links = empty[2];
    r.op_times = empty[3];
    r.ended = empty[4];
    r.recomputed = empty[5];
    r.waited = empty[6];
    r.heap.heap = empty[7];
    r.num_ops = num_ops;
    r.idle[0] = r.idle[1] = engines;
    PyObject *result = NULL, *residencies = NULL, *op_us = NULL, *widest = NULL;
    residencies = PyObject_GetAttrString(data, "residencies");
    op_us = residencies ? PyObject_GetAttrString(data, "op_us") : NULL;
    widest = op_us ? PyObject_GetAttrString(data, "widest_swap_out") : NULL;
    if (!widest) goto done;
    if (!PyLong_Check(widest)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    r.widest = PyLong_AsLongLongAndOverflow(widest, &overflow);
    if (r.widest == -1 && PyErr_Occurred()) goto done;
    if (overflow) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    int status = read_op_us(&r, op_us);
    if (status == 1) status = prepare(&r, data, residencies);
    if (status == 1 && run(&r) == 0) result = records(&r, residencies, d2h, h2d, columns);
    else if (status == 0) result = Py_NewRef(Py_None);
done:
    release(&r);
    Py_XDECREF(residencies);
    Py_XDECREF(op_us);
    Py_XDECREF(widest);
    return result;
}

static PyMethodDef methods[] = {
    {"replay", replay, METH_VARARGS,
     "replay(data, num_ops, engines, d2h, h2d, columns=False) -> (op_times, copies, "
     "recomputes, recompute_us, waited, held_after), as cupool.sim.timeline.python_replay "
     "records them, or None for an input left to Python. With columns, op_times is bytes of "
     "(dispatch, start, end) doubles per op, copies bytes of (start, end) doubles per copy "
     "in completion order, and held_after None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_timeline",
    "The flat replay of cupool.sim.timeline, compiled (the same Timeline, bit for bit).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__timeline(void) { return PyModule_Create(&module); }
