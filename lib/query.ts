/**
 * The platform's query language in memory: whether a document matches a filter (`matches`), an update applied to a
 * document (`applyUpdate`), a projection (`project`). The engine's grant checks on writes, the live cursors and the
 * change deliveries match with it, and the PostgreSQL store evaluates with it what its SQL translation
 * (stores/pg.query.ts) cannot say exactly. Where that translation is exact, the two agree: a property test
 * (test/integration/query-sql.property.test.ts) compares them on random documents and filters. docs/api.md, "The
 * query language", states the meaning for users.
 *
 * The meaning, MongoDB's notation with one reading of paths and arrays everywhere:
 *
 * - A field path `a.b.c` reaches values step by step: a step on a sub-document takes its key; a step on an array
 *   takes the key of each of its sub-document elements (one level: an array inside an array is not entered); a
 *   numeric step on an array takes that element, on a sub-document the key of that name. A path that reaches nothing
 *   is missing.
 * - A condition on a field tests each value the path reaches and, when one is an array, each of its elements (one
 *   level): `{tags: "a"}` matches `tags: ["a", "b"]`, `{n: {$gt: 3}}` matches `n: [1, 5]`, not `n: [[5]]`.
 * - Equality with a sub-document or an array is deep equality, key order not counted; numbers compare by value.
 * - `null` matches null, a missing field, and an array holding null; on a dotted path also a value of the path's
 *   parent that lacks the last key (`{"lines.sku": null}` matches `lines: [{sku: 1}, {}]`).
 * - `$gt`, `$gte`, `$lt`, `$lte` compare numbers with numbers, strings with strings (by Unicode code point), booleans
 *   with booleans (false < true); anything else does not match, except that `$gte`/`$lte` null mean `null`.
 * - `$ne`, `$nin` and a field-level `$not` are the negation of the positive test (`{tags: {$ne: "a"}}` excludes
 *   `["a", "b"]`); `$exists` asks whether the path reaches anything; `$size` whether a value is an array of that
 *   length; `$regex` whether a string (or an array's string element) matches (RE2, lib/safe-regex.ts).
 * - `$elemMatch` with a sub-query: an array holding a sub-document that matches it. With operators only: an array
 *   holding an element (or, for an element that is an array, one of its elements) that passes every operator itself.
 * - `$and`, `$or`, and the query-level `$not` (a negated sub-query) combine conditions.
 *
 * Anything else (an unknown operator, a malformed operand) answers 400: filters reach here validated
 * (lib/query-safety.ts) or made by the platform.
 */
import { badRequest } from "./errors";

export type Filter = Record<string, unknown>;
type Doc = Record<string, unknown>;

const has = (o: object, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k);
const isNum = (s: string): boolean => /^\d+$/.test(s);

/** A sub-document: a plain object (not an array, not a RegExp). */
export const isSubDocument = (v: unknown): v is Doc => typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof RegExp);

/** An object of operators applied to one value (`{$gt: 1}`), as opposed to a sub-document or a sub-query. */
export const isOperatorObject = (v: unknown): v is Record<string, unknown> => isSubDocument(v) && Object.keys(v).length > 0 && Object.keys(v).every((k) => k.startsWith("$"));

const ELEMENT_TESTS = new Set(["$gt", "$gte", "$lt", "$lte", "$in", "$regex"]);

/**
 * The operator form of `$elemMatch` (`{tags: {$elemMatch: {$in: ["a", "b"]}}}`) whose operators all test one element
 * as a value: comparisons, `$in`, `$regex` (the forms the SQL translation evaluates itself).
 */
export function elementTests(v: unknown): v is Record<string, unknown> {
	if (!isSubDocument(v)) return false;
	const ops = Object.keys(v);
	return ops.length > 0 && ops.every((op) => ELEMENT_TESTS.has(op));
}

// ---------------------------------------------------------------------------------------------------------------
// Values

/** Strings by Unicode code point (PostgreSQL's order for SQL/JSON comparisons and for `collate "C"` text). */
export function compareStrings(a: string, b: string): number {
	if (a === b) return 0;
	const n = Math.min(a.length, b.length);
	for (let i = 0; i < n; i++) {
		const x = a.charCodeAt(i);
		const y = b.charCodeAt(i);
		if (x === y) continue;
		// A surrogate pair stands for a code point above every UTF-16 unit it is not part of.
		if ((x >= 0xd800 && x <= 0xdfff) || (y >= 0xd800 && y <= 0xdfff)) return a.codePointAt(i)! - b.codePointAt(i)!;
		return x - y;
	}
	return a.length - b.length;
}

/** Deep equality of JSON values: key order not counted, numbers by value. */
export function equal(a: unknown, b: unknown): boolean {
	if (a === b) return true;
	if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
	if (Array.isArray(a) || Array.isArray(b)) {
		if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
		for (let i = 0; i < a.length; i++) if (!equal(a[i], b[i])) return false;
		return true;
	}
	if (a instanceof RegExp || b instanceof RegExp) return false;
	const ka = Object.keys(a);
	if (ka.length !== Object.keys(b).length) return false;
	for (const k of ka) if (!has(b, k) || !equal((a as Doc)[k], (b as Doc)[k])) return false;
	return true;
}

/** `a` against `b` under a comparison operator, within one type; undefined when the types differ. */
function compare(a: unknown, b: unknown): number | undefined {
	if (typeof a === "number" && typeof b === "number") return a - b;
	if (typeof a === "string" && typeof b === "string") return compareStrings(a, b);
	if (typeof a === "boolean" && typeof b === "boolean") return Number(a) - Number(b);
	return undefined;
}

const CMP: Record<string, (c: number) => boolean> = { $gt: (c) => c > 0, $gte: (c) => c >= 0, $lt: (c) => c < 0, $lte: (c) => c <= 0 };

/** The values a path reaches in `doc` (see the module's comment). */
function valuesAt(doc: unknown, segs: string[], from = 0): unknown[] {
	let vals: unknown[] = [doc];
	for (let s = from; s < segs.length; s++) {
		const seg = segs[s];
		const next: unknown[] = [];
		for (const v of vals) {
			if (Array.isArray(v)) {
				if (isNum(seg)) {
					if (Number(seg) < v.length) next.push(v[Number(seg)]);
				} else for (const e of v) if (isSubDocument(e) && has(e, seg)) next.push(e[seg]);
			} else if (isSubDocument(v) && has(v, seg)) next.push(v[seg]);
		}
		vals = next;
	}
	return vals;
}

/** What a condition tests of the values a path reached: each value and each element of an array value. */
function candidates(vals: unknown[]): unknown[] {
	if (!vals.some(Array.isArray)) return vals;
	const out: unknown[] = [];
	for (const v of vals) {
		out.push(v);
		if (Array.isArray(v)) out.push(...v);
	}
	return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Matching

/**
 * Whether a stored document matches a filter: a platform filter names the id `id`, as the stored document does (grant
 * row filters, zones, live views, the store's own matching of what its SQL does not evaluate exactly).
 */
export function matches(doc: Doc, filter: Filter): boolean {
	for (const k of Object.keys(filter)) {
		const v = filter[k];
		if (k === "$and") {
			if (!Array.isArray(v)) throw unsupported("$and must be an array");
			if (!v.every((x) => matches(doc, subQuery(x)))) return false;
		} else if (k === "$or") {
			if (!Array.isArray(v)) throw unsupported("$or must be an array");
			if (!v.some((x) => matches(doc, subQuery(x)))) return false;
		} else if (k === "$not") {
			if (matches(doc, subQuery(v))) return false;
		} else if (k.startsWith("$")) throw unsupported(`unknown operator ${k}`);
		else if (!field(doc, k, v)) return false;
	}
	return true;
}

const unsupported = (why: string) => badRequest(`query is not supported by the document store: ${why}`);

function subQuery(v: unknown): Filter {
	if (!isSubDocument(v)) throw unsupported("a sub-query must be an object");
	return v;
}

/** One field's condition: `v` a value (equality), a RegExp, or an operator object. */
function field(doc: Doc, path: string, v: unknown): boolean {
	const segs = path.split(".");
	if (isOperatorObject(v)) {
		for (const op of Object.keys(v)) if (!operator(doc, segs, op, v[op])) return false;
		return true;
	}
	return eq(doc, segs, v);
}

/** `{path: v}`: an equality (null: also missing), or a RegExp's match. */
function eq(doc: Doc, segs: string[], v: unknown): boolean {
	if (v instanceof RegExp) return regex(valuesAt(doc, segs), v);
	const vals = valuesAt(doc, segs);
	if (v === null) return nullAt(doc, segs, vals);
	const cs = candidates(vals);
	if (typeof v !== "object") return cs.includes(v);
	return cs.some((c) => equal(c, v));
}

/**
 * `{path: null}`: the path reaches nothing, or null (or an array holding null); on a dotted path also when a value of
 * the parent path (or an element of an array value) is not a sub-document holding the last key.
 */
function nullAt(doc: Doc, segs: string[], vals: unknown[]): boolean {
	if (!vals.length || candidates(vals).includes(null)) return true;
	const last = segs[segs.length - 1];
	if (segs.length === 1 || isNum(last)) return false;
	// The parent's values, an array value standing for its elements.
	const parents = valuesAt(doc, segs.slice(0, -1)).flatMap((p) => (Array.isArray(p) ? p : [p]));
	return parents.some((p) => !isSubDocument(p) || !has(p, last));
}

function regex(vals: unknown[], re: unknown): boolean {
	if (!(re instanceof RegExp)) throw unsupported("$regex must be a regular expression");
	return candidates(vals).some((c) => typeof c === "string" && re.test(c));
}

function operator(doc: Doc, segs: string[], op: string, v: unknown): boolean {
	switch (op) {
		case "$eq":
			return eq(doc, segs, v);
		case "$ne":
			return !eq(doc, segs, v);
		case "$in":
			if (!Array.isArray(v)) throw unsupported("$in must be an array");
			return v.some((x) => eq(doc, segs, x));
		case "$nin":
			if (!Array.isArray(v)) throw unsupported("$nin must be an array");
			return !v.some((x) => eq(doc, segs, x));
		case "$gt":
		case "$gte":
		case "$lt":
		case "$lte":
			if (v === null) return op === "$gte" || op === "$lte" ? eq(doc, segs, null) : false;
			return candidates(valuesAt(doc, segs)).some((c) => {
				const r = compare(c, v);
				return r !== undefined && CMP[op](r);
			});
		case "$exists":
			return valuesAt(doc, segs).length > 0 === !!v;
		case "$size":
			if (!Number.isInteger(v)) throw unsupported("$size must be an integer");
			return valuesAt(doc, segs).some((x) => Array.isArray(x) && x.length === v);
		case "$regex":
			return regex(valuesAt(doc, segs), v);
		case "$not":
			if (v instanceof RegExp) return !regex(valuesAt(doc, segs), v);
			if (!isOperatorObject(v)) throw unsupported("$not must hold operators or a regular expression");
			return !field(doc, segs.join("."), v);
		case "$elemMatch":
			return valuesAt(doc, segs).some((a) => Array.isArray(a) && a.some((e) => elementMatches(e, v)));
		default:
			throw unsupported(`unknown operator ${op}`);
	}
}

/** One element of an array under `$elemMatch`: a sub-document matching the sub-query, or a value passing the tests. */
function elementMatches(e: unknown, v: unknown): boolean {
	if (isOperatorObject(v)) return (Array.isArray(e) ? e : [e]).some((x) => passes(x, v));
	return isSubDocument(e) && matches(e, subQuery(v));
}

/** Whether one value passes every operator of `ops` itself (an element under the operator form of `$elemMatch`). */
function passes(x: unknown, ops: Record<string, unknown>): boolean {
	const is = (y: unknown) => (y instanceof RegExp ? typeof x === "string" && y.test(x) : equal(x, y));
	for (const [op, v] of Object.entries(ops)) {
		let ok: boolean;
		switch (op) {
			case "$eq":
				ok = is(v);
				break;
			case "$ne":
				ok = !is(v);
				break;
			case "$in":
			case "$nin":
				if (!Array.isArray(v)) throw unsupported(`${op} must be an array`);
				ok = v.some(is) === (op === "$in");
				break;
			case "$gt":
			case "$gte":
			case "$lt":
			case "$lte": {
				const r = compare(x, v);
				ok = v === null ? x === null && op.endsWith("e") : r !== undefined && CMP[op](r);
				break;
			}
			case "$exists":
				ok = !!v;
				break;
			case "$size":
				ok = Array.isArray(x) && x.length === v;
				break;
			case "$regex":
				if (!(v instanceof RegExp)) throw unsupported("$regex must be a regular expression");
				ok = typeof x === "string" && v.test(x);
				break;
			case "$not":
				if (v instanceof RegExp) ok = !(typeof x === "string" && v.test(x));
				else if (isOperatorObject(v)) ok = !passes(x, v);
				else throw unsupported("$not must hold operators or a regular expression");
				break;
			case "$elemMatch":
				ok = Array.isArray(x) && x.some((e) => elementMatches(e, v));
				break;
			default:
				throw unsupported(`unknown operator ${op}`);
		}
		if (!ok) return false;
	}
	return true;
}

// ---------------------------------------------------------------------------------------------------------------
// Updates

/** A copy of a JSON value (documents are JSON: no dates, no functions). */
export function copy<T>(v: T): T {
	if (typeof v !== "object" || v === null || v instanceof RegExp) return v;
	if (Array.isArray(v)) return v.map(copy) as T;
	const out: Doc = {};
	for (const k of Object.keys(v)) out[k] = copy((v as Doc)[k]);
	return out as T;
}

const FORBIDDEN_KEYS = new Set(["__proto__", "constructor", "prototype"]);

/**
 * Keys a stored document may not have: a leading `$` (an operator) or a `.` (a path), at any depth, and the names that
 * reach an object's prototype. 400: a body reaches here validated (lib/validate.ts), so this is a last guard.
 */
export function checkKeys(v: unknown): void {
	if (Array.isArray(v)) for (const x of v) checkKeys(x);
	else if (isSubDocument(v))
		for (const k of Object.keys(v)) {
			if (k.startsWith("$") || k.includes(".") || FORBIDDEN_KEYS.has(k))
				throw badRequest(`field name ${JSON.stringify(k)} cannot be stored: names cannot begin with $ or contain .`);
			checkKeys(v[k]);
		}
}

/** The object holding the last step of `path` in `doc`, made on the way when `create`; undefined when absent. */
function parentOf(doc: Doc, path: string, create: boolean): { at: Doc | unknown[]; key: string } | undefined {
	const segs = path.split(".");
	let at: unknown = doc;
	for (let i = 0; i < segs.length; i++) {
		const seg = segs[i];
		if (FORBIDDEN_KEYS.has(seg) || seg === "" || seg.startsWith("$")) throw badRequest(`field path ${path} cannot be updated`);
		if (!isSubDocument(at) && !Array.isArray(at)) throw badRequest(`field path ${path} runs through a value that is not a sub-document`);
		if (i === segs.length - 1) return { at: at as Doc, key: seg };
		const container = at as Doc;
		if (!has(container, seg) || container[seg] === undefined) {
			if (!create) return undefined;
			container[seg] = {};
		}
		at = container[seg];
	}
	return undefined;
}

type Modifier = (target: { at: Doc; key: string }, value: unknown, path: string) => void;

const arrayAt = (t: { at: Doc; key: string }, path: string, op: string): unknown[] => {
	if (!has(t.at, t.key)) t.at[t.key] = [];
	const a = t.at[t.key];
	if (!Array.isArray(a)) throw badRequest(`${op} on ${path}: the field is not an array`);
	return a;
};

/** `$each` of a `$push`/`$addToSet` value, else the value itself. */
function eachOf(value: unknown, op: string, extra: string[] = []): { values: unknown[]; slice?: number } {
	if (!isOperatorObject(value) || !("$each" in value)) return { values: [value] };
	const unknown = Object.keys(value).filter((k) => k !== "$each" && !extra.includes(k));
	if (unknown.length || !Array.isArray(value.$each)) throw badRequest(`${op}: $each must be an array${extra.length ? `, beside only ${extra.join(", ")}` : ""}`);
	const slice = value.$slice;
	if (slice !== undefined && !Number.isInteger(slice)) throw badRequest(`${op}: $slice must be an integer`);
	return { values: value.$each, slice: slice as number | undefined };
}

const MODIFIERS: Record<string, { create: boolean; apply: Modifier }> = {
	$set: {
		create: true,
		apply: (t, v) => {
			t.at[t.key] = copy(v);
		},
	},
	$unset: {
		create: false,
		apply: (t) => {
			if (Array.isArray(t.at)) {
				// An element of an array is cleared, not removed (the others keep their positions).
				if (isNum(t.key) && Number(t.key) < t.at.length) (t.at as unknown[])[Number(t.key)] = null;
			} else delete t.at[t.key];
		},
	},
	$inc: {
		create: true,
		apply: (t, v, path) => {
			if (typeof v !== "number" || !Number.isFinite(v)) throw badRequest(`$inc on ${path}: the amount must be a number`);
			if (!has(t.at, t.key)) t.at[t.key] = v;
			else if (typeof t.at[t.key] === "number") t.at[t.key] = (t.at[t.key] as number) + v;
			else throw badRequest(`$inc on ${path}: the field is not a number`);
		},
	},
	$push: {
		create: true,
		apply: (t, v, path) => {
			const a = arrayAt(t, path, "$push");
			const { values, slice } = eachOf(v, "$push", ["$slice"]);
			checkKeys(values);
			a.push(...values.map(copy));
			if (slice !== undefined) t.at[t.key] = slice < 0 ? a.slice(Math.max(0, a.length + slice)) : a.slice(0, slice);
		},
	},
	$addToSet: {
		create: true,
		apply: (t, v, path) => {
			const a = arrayAt(t, path, "$addToSet");
			const { values } = eachOf(v, "$addToSet");
			checkKeys(values);
			for (const x of values) if (!a.some((y) => equal(x, y))) a.push(copy(x));
		},
	},
	$pull: {
		create: false,
		apply: (t, v, path) => {
			if (!has(t.at, t.key)) return;
			const a = t.at[t.key];
			if (!Array.isArray(a)) throw badRequest(`$pull on ${path}: the field is not an array`);
			const drop = (e: unknown) => (isOperatorObject(v) ? passes(e, v) : isSubDocument(v) ? isSubDocument(e) && matches(e, v) : equal(e, v));
			t.at[t.key] = a.filter((e) => !drop(e));
		},
	},
};

/**
 * The document after a store update: `$set`, `$unset`, `$inc`, `$push` (`$each`, `$slice`), `$addToSet` (`$each`),
 * `$pull` (a value, a sub-query, or operators an element passes), on dotted paths (`$set` and the array operators make
 * missing sub-documents on the way). A copy: `doc` is left as it was. Existing keys keep their place, new keys come
 * last. The `id` never changes.
 */
export function applyUpdate<T extends Doc>(doc: T, update: Record<string, unknown>): T {
	const out = copy(doc) as Doc;
	const ops = Object.keys(update);
	if (!ops.length || !ops.every((op) => op.startsWith("$"))) throw new Error("a store update holds only operators ($set, $inc...)");
	for (const op of ops) {
		const mod = MODIFIERS[op];
		if (!mod) throw new Error(`unknown update operator ${op}`);
		const fields = update[op];
		if (!isSubDocument(fields)) throw new Error(`${op} takes an object of fields`);
		for (const [path, value] of Object.entries(fields)) {
			if (path === "id" || path.startsWith("id.")) {
				if (op === "$set" && equal(value, out.id)) continue;
				throw badRequest("a document's id cannot change");
			}
			if (op === "$set") checkKeys(value);
			const t = parentOf(out, path, mod.create);
			if (t) mod.apply(t as { at: Doc; key: string }, value, path);
		}
	}
	return out as T;
}

// ---------------------------------------------------------------------------------------------------------------
// Projection

/**
 * A document with only the included paths (`{a: 1, "b.c": 1}`), or without the excluded ones (`{a: 0}`); `id` stays
 * unless `id: 0`. Through an array of sub-documents a dotted path keeps (or drops) the key in each element; an
 * inclusion keeps no element that is not a sub-document. Mixing inclusion and exclusion (but for `id`) is a 400.
 */
export function project<T extends Doc>(doc: T, projection: Record<string, 0 | 1 | boolean> | undefined): T {
	if (!projection || !Object.keys(projection).length) return doc;
	const { id, ...rest } = projection;
	const paths = Object.keys(rest);
	const flags = new Set(paths.map((k) => (rest[k] ? 1 : 0)));
	if (flags.size > 1) throw badRequest("projection cannot mix inclusion and exclusion");
	const include = paths.length === 0 ? id === undefined || !!id : flags.has(1);
	let out: Doc;
	if (include) {
		out = {};
		if (id === undefined || id) if (has(doc, "id")) out.id = doc.id;
		for (const p of paths) pick(doc, out, p.split("."));
	} else {
		out = copy(doc) as Doc;
		for (const p of paths) drop(out, p.split("."));
		if (id !== undefined && !id) delete out.id;
	}
	return out as T;
}

function pick(from: unknown, into: Doc, segs: string[]): void {
	if (!isSubDocument(from) || !has(from, segs[0])) return;
	const [head, ...tail] = segs;
	const v = from[head];
	if (!tail.length) {
		into[head] = copy(v);
		return;
	}
	if (Array.isArray(v)) {
		const have = Array.isArray(into[head]) ? (into[head] as Doc[]) : undefined;
		const elements = v.filter(isSubDocument);
		const picked = elements.map((e, i) => {
			const target = have?.[i] ?? {};
			pick(e, target, tail);
			return target;
		});
		into[head] = picked;
	} else if (isSubDocument(v)) {
		const target = isSubDocument(into[head]) ? (into[head] as Doc) : {};
		pick(v, target, tail);
		if (Object.keys(target).length || has(into, head)) into[head] = target;
	}
}

function drop(at: unknown, segs: string[]): void {
	if (Array.isArray(at)) {
		for (const e of at) drop(e, segs);
		return;
	}
	if (!isSubDocument(at) || !has(at, segs[0])) return;
	if (segs.length === 1) delete at[segs[0]];
	else drop(at[segs[0]], segs.slice(1));
}
