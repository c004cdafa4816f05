/**
 * Parsing and validation of the untrusted list/count/cursor query parameters before they reach
 * the document store. Only the operator subset of the query language (lib/query.ts) passes; the
 * output is a fresh object tree that never carries a forbidden key, and `$regex` strings are
 * compiled to linear-time RegExps (lib/safe-regex.ts). Every failure is a 400.
 */
import { TENANT_REF } from "../catalog/store";
import type { CollectionDef } from "../catalog/types";
import { badRequest } from "./errors";
import { compileSafe, RegexBudget } from "./safe-regex";

export type Filter = Record<string, unknown>;
export interface PopulateSpec {
	path: string;
	select?: string[];
	match?: Filter;
}
export interface Pagination {
	limit: number;
	skip: number;
	sort?: Record<string, 1 | -1>;
}

export const MAX_DEPTH = 8,
	MAX_IN = 500,
	MAX_REGEX = 256;
/**
 * Conditions one filter may hold in all (every field condition and operator, at any depth of $or, $and, $not and
 * $elemMatch), and values of all its $in/$nin lists together: each is evaluated on every candidate document, so a
 * filter's cost is about their number times the documents it reads (an $or of 200 comparisons over 60 000 notes cost
 * 12 s of matching).
 */
export const MAX_CONDITIONS = 100,
	MAX_IN_TOTAL = 1000;
/**
 * Documents one read of a request (a list, a count, a page of a cursor) may match one by one in the gateway's process,
 * where the store cannot evaluate the filter itself (PostgreSQL: FindOptions.examine); beyond, 400. A count or a
 * list's total reads every candidate: 30 000 of them cost 6 s of the process's time.
 */
export const MAX_EXAMINED = 10_000;
const MAX_LOGICAL = 50,
	MAX_LIMIT = 100,
	DEFAULT_LIMIT = 10,
	MAX_SKIP = 1_000_000,
	MAX_SORT = 5,
	MAX_FIELDS = 100,
	MAX_POPULATE = 10;

const FIELD = /^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$/;
const FORBIDDEN = new Set(["__proto__", "constructor", "prototype"]);
// Server-side code execution in MongoDB's notation: refused by name so the client knows why.
const BANNED = new Set(["$where", "$function", "$expr", "$accumulator"]);
const COMPARISON = new Set(["$eq", "$lt", "$lte", "$gt", "$gte", "$ne"]);
const KNOWN = new Set([...COMPARISON, "$in", "$nin", "$regex", "$options", "$exists", "$size", "$elemMatch", "$or", "$and", "$not"]);
const ZONES = new Set(["own", "share", "group", "client"]);
type Obj = Record<string, unknown>;

// moleculer-web may hand over qs-built objects, which can have a null prototype.
const isPlainObject = (v: unknown): v is Obj => typeof v === "object" && v !== null && [Object.prototype, null].includes(Object.getPrototypeOf(v));
const isPrimitive = (v: unknown): boolean => v === null || typeof v === "string" || typeof v === "boolean" || (typeof v === "number" && Number.isFinite(v));
const has = (o: Obj, k: string) => Object.prototype.hasOwnProperty.call(o, k);
// An object of operators applied to one value, as opposed to a (sub-)query naming fields.
const isOperatorExpr = (o: Obj): boolean => Object.keys(o).length > 0 && Object.keys(o).every((k) => k.startsWith("$") && k !== "$or" && k !== "$and");

export function parseJsonParam(name: string, raw: unknown): unknown {
	// `?query=` is what clients send for "no value"; treating it as absent beats a 400.
	if (raw === undefined || (typeof raw === "string" && raw.trim() === "")) return undefined;
	if (isPlainObject(raw) || Array.isArray(raw)) return raw;
	if (typeof raw === "string")
		try {
			return JSON.parse(raw);
		} catch {
			/* same message as a non-string */
		}
	throw badRequest(`${name} must be valid JSON`);
}

/** Path segments are checked too: `a.__proto__.b` would pollute through dotted paths downstream. */
export function checkField(name: string): string {
	for (const seg of name.split(".")) if (FORBIDDEN.has(seg)) throw badRequest(`forbidden key ${seg}`);
	if (!FIELD.test(name)) throw badRequest(`invalid field name ${name}`);
	return name;
}

function checkDepth(name: string, v: unknown, depth: number): void {
	if (typeof v !== "object" || v === null) return;
	if (depth > MAX_DEPTH) throw badRequest(`${name} is too deeply nested (at most ${MAX_DEPTH} levels)`);
	for (const child of Object.values(v)) checkDepth(name, child, depth + 1);
}

function checkOperator(op: string): string {
	if (BANNED.has(op)) throw badRequest(`operator ${op} is not allowed`);
	if (!KNOWN.has(op)) throw badRequest(`unknown operator ${op}`);
	return op;
}

export const parseQuery = (raw: unknown): Filter => parseFilter("query", raw);

function parseFilter(name: string, raw: unknown): Filter {
	const v = parseJsonParam(name, raw);
	if (v === undefined) return {};
	if (!isPlainObject(v)) throw badRequest(`${name} must be a JSON object`);
	// Measured on the raw tree (objects and arrays alike) so the validators never recurse unboundedly.
	checkDepth(name, v, 1);
	// Every pattern of one filter shares one work budget (lib/safe-regex.ts), and the filter one count of conditions.
	const prev = budget;
	const prevCount = counted;
	budget = new RegexBudget();
	counted = { name, conditions: 0, values: 0 };
	try {
		return subQuery(v, `${name}.`);
	} finally {
		budget = prev;
		counted = prevCount;
	}
}

let budget = new RegexBudget();
let counted = { name: "query", conditions: 0, values: 0 };

/** Counts `n` conditions (and `values` $in/$nin values) of the filter being parsed; 400 past the limits. */
function count(n: number, values = 0): void {
	counted.conditions += n;
	counted.values += values;
	if (counted.conditions > MAX_CONDITIONS) throw badRequest(`${counted.name} accepts at most ${MAX_CONDITIONS} conditions in all`);
	if (counted.values > MAX_IN_TOTAL) throw badRequest(`${counted.name} accepts at most ${MAX_IN_TOTAL} $in/$nin values in all`);
}

/** `where`: the path of `q` in messages, e.g. `query.` or `query.tags.$elemMatch.`. */
function subQuery(q: Obj, where = ""): Filter {
	const out: Filter = {};
	for (const key of Object.keys(q)) {
		const val = q[key];
		if (!key.startsWith("$")) out[checkField(key)] = fieldValue(key, val, where + key);
		else if (checkOperator(key) === "$or" || key === "$and") {
			if (!Array.isArray(val) || !val.length || !val.every(isPlainObject)) throw badRequest(`${key} must be a non-empty array of objects`);
			if (val.length > MAX_LOGICAL) throw badRequest(`${key} accepts at most ${MAX_LOGICAL} entries`);
			out[key] = val.map((x) => subQuery(x, where));
		} else if (key === "$not") {
			// A negated sub-query (the platform's form; MongoDB's notation has the field-level $not handled below too).
			if (!isPlainObject(val)) throw badRequest("$not must be an object");
			out[key] = subQuery(val, where);
		} else throw badRequest(`operator ${key} must be applied to a field`);
	}
	return out;
}

function fieldValue(field: string, val: unknown, where: string): unknown {
	const keys = isPlainObject(val) ? Object.keys(val) : [];
	const ops = keys.filter((k) => k.startsWith("$")).length;
	if (ops === 0) {
		count(1);
		return exactValue(field, val);
	}
	if (ops !== keys.length) throw badRequest(`${field} cannot mix operators and fields`);
	return operators(val as Obj, true, where);
}

/** An exact match on a primitive, an array or a sub-document: no operator may hide inside. */
function exactValue(path: string, val: unknown): unknown {
	if (isPrimitive(val)) return val;
	if (Array.isArray(val)) return val.map((e) => exactValue(path, e));
	if (!isPlainObject(val)) throw badRequest(`${path} has an unsupported value`);
	const out: Obj = {};
	for (const key of Object.keys(val)) {
		if (key.startsWith("$")) throw badRequest(`${key} is not allowed in sub-document ${path}`);
		out[checkField(key)] = exactValue(`${path}.${key}`, val[key]);
	}
	return out;
}

/** `underField`: directly under a query field, where a lone `$eq` can become the plain value. */
function operators(expr: Obj, underField: boolean, where: string): unknown {
	const out: Obj = {};
	const keys = Object.keys(expr);
	for (const op of keys.map(checkOperator)) {
		const v = (out[op] = expr[op]);
		if (op !== "$options" && op !== "$not" && op !== "$elemMatch") count(1);
		if (COMPARISON.has(op) && !isPrimitive(v)) throw badRequest(`${op} must be a string, number, boolean or null`);
		if (op === "$exists" && typeof v !== "boolean") throw badRequest("$exists must be a boolean");
		if (op === "$size" && !(Number.isInteger(v) && (v as number) >= 0)) throw badRequest("$size must be a non-negative integer");
		if (op === "$in" || op === "$nin") {
			if (!Array.isArray(v)) throw badRequest(`${op} must be an array`);
			if (v.length > MAX_IN) throw badRequest(`${op} accepts at most ${MAX_IN} values`);
			if (!v.every(isPrimitive)) throw badRequest(`${op} accepts only strings, numbers, booleans and null`);
			count(0, v.length);
			out[op] = [...v];
		} else if (op === "$elemMatch") {
			if (!isPlainObject(v)) throw badRequest("$elemMatch must be an object");
			out[op] = isOperatorExpr(v) ? operators(v, false, where) : subQuery(v, `${where}.`);
		} else if (op === "$not") {
			if (typeof v === "string") out[op] = compileRegex("$not", v, undefined, where);
			else if (isPlainObject(v) && isOperatorExpr(v)) out[op] = operators(v, false, where);
			else throw badRequest("$not must be an object of operators or a regular expression string");
		} else if (op === "$or" || op === "$and") throw badRequest(`operator ${op} must be used at query level`);
	}
	if (has(expr, "$options") && !has(expr, "$regex")) throw badRequest("$options requires $regex");
	// One form per meaning: flags go into the RegExp, $eq becomes a value or a one-element $in.
	if (has(expr, "$regex")) out.$regex = compileRegex("$regex", expr.$regex, expr.$options, where);
	delete out.$options;
	if (has(out, "$eq")) {
		if (underField && keys.length === 1) return out.$eq;
		if (has(out, "$in")) throw badRequest("$eq cannot be combined with $in");
		out.$in = [out.$eq];
		delete out.$eq;
	}
	return out;
}

/**
 * Patterns are matched by RE2 (linear time, lib/safe-regex.ts): no heuristic about nested quantifiers, which could
 * never be complete; syntax RE2 lacks (backreferences, lookaround) is a 400.
 */
function compileRegex(op: string, src: unknown, options: unknown, where: string): RegExp {
	if (typeof src !== "string") throw badRequest(`${op} must be a string`);
	if (src.length > MAX_REGEX) throw badRequest(`${op} is too long (at most ${MAX_REGEX} characters)`);
	// JS has no `x` (extended) flag; silently dropping it would change what the pattern means.
	const flags = options === undefined ? "" : options;
	if (typeof flags !== "string" || !/^[ims]*$/.test(flags)) throw badRequest("$options may only contain i, m and s");
	return compileSafe(op, where, src, [...new Set(flags)].join(""), budget);
}

/**
 * docs/contracts.md "Fields that are never queried": a write-only or internal field of the collection, at any depth of the
 * path (`password.x`), or any name starting with `_` (store keys such as `_rev`, and `_id`: a document's id is `id`).
 */
export function neverQueried(col: CollectionDef, path: string): boolean {
	const top = path.split(".")[0];
	if (top.startsWith("_") || top === TENANT_REF) return true;
	const def = Object.prototype.hasOwnProperty.call(col.fields, top) ? col.fields[top] : undefined;
	return !!(def?.writeOnly || def?.internal);
}

/** Every field path a validated filter names, so authorization can refuse filters on hidden fields. */
export const referencedFields = (filter: Filter): string[] => [...collectQuery(filter, "", new Set())];

function collectQuery(q: Obj, prefix: string, out: Set<string>): Set<string> {
	for (const key of Object.keys(q)) {
		if (!key.startsWith("$")) collectValue(prefix + key, q[key], out);
		// $or/$and hold arrays of sub-queries, query-level $not a single one.
		else for (const e of [q[key]].flat()) if (isPlainObject(e)) collectQuery(e, prefix, out);
	}
	return out;
}

function collectValue(path: string, v: unknown, out: Set<string>): void {
	out.add(path);
	if (Array.isArray(v)) for (const e of v) collectValue(path, e, out);
	if (!isPlainObject(v)) return;
	if (!isOperatorExpr(v)) return void collectQuery(v, `${path}.`, out);
	for (const sub of [v.$elemMatch, v.$not].filter(isPlainObject)) {
		if (isOperatorExpr(sub)) collectValue(path, sub, out);
		else collectQuery(sub, `${path}.`, out);
	}
}

function intParam(name: string, v: unknown, fallback: number, min: number, max: number): number {
	if (v === undefined) return fallback;
	// qs-built objects (`pagination[limit]=5`) carry numbers as strings.
	const n = typeof v === "string" && /^-?\d+$/.test(v) ? Number(v) : v;
	if (typeof n !== "number" || !Number.isInteger(n)) throw badRequest(`${name} must be an integer`);
	if (n < min) throw badRequest(`${name} must be at least ${min}`);
	if (n > max) throw badRequest(`${name} must be at most ${max}`);
	return n;
}

export function parsePagination(raw: unknown): Pagination {
	const v = parseJsonParam("pagination", raw);
	if (v === undefined) return { limit: DEFAULT_LIMIT, skip: 0 };
	if (!isPlainObject(v)) throw badRequest("pagination must be a JSON object");
	for (const key of Object.keys(v)) if (!["limit", "skip", "sort"].includes(key)) throw badRequest(`pagination.${key} is not allowed`);
	const limit = intParam("pagination.limit", v.limit, DEFAULT_LIMIT, 1, MAX_LIMIT);
	const result: Pagination = { limit, skip: intParam("pagination.skip", v.skip, 0, 0, MAX_SKIP) };
	if (v.sort === undefined) return result;
	if (!isPlainObject(v.sort)) throw badRequest("pagination.sort must be a JSON object");
	const keys = Object.keys(v.sort);
	if (keys.length > MAX_SORT) throw badRequest(`pagination.sort accepts at most ${MAX_SORT} fields`);
	const sort: Record<string, 1 | -1> = {};
	for (const key of keys) {
		const d = v.sort[checkField(key)];
		const dir = typeof d === "string" ? d.toLowerCase() : d;
		if (dir === 1 || dir === "1" || dir === "asc") sort[key] = 1;
		else if (dir === -1 || dir === "-1" || dir === "desc") sort[key] = -1;
		else throw badRequest(`pagination.sort.${key} must be 1, -1, "asc" or "desc"`);
	}
	if (keys.length > 0) result.sort = sort;
	return result;
}

export function parseProjection(raw: unknown): Record<string, 0 | 1> | undefined {
	const v = parseJsonParam("projection", raw);
	if (v === undefined) return undefined;
	if (!isPlainObject(v)) throw badRequest("projection must be a JSON object");
	const keys = Object.keys(v);
	if (keys.length > MAX_FIELDS) throw badRequest(`projection accepts at most ${MAX_FIELDS} fields`);
	const out: Record<string, 0 | 1> = {};
	let mode: 0 | 1 | undefined;
	for (const key of keys) {
		const x = v[checkField(key)];
		const flag = x === 1 || x === true ? 1 : x === 0 || x === false ? 0 : undefined;
		if (flag === undefined) throw badRequest(`projection.${key} must be 0 or 1`);
		// MongoDB's `_id` may be dropped from an inclusion or kept in an exclusion here; the authority then refuses it as a
		// field never queried (neverQueried), with its own message.
		if (key !== "_id" && (mode ??= flag) !== flag) throw badRequest("projection cannot mix inclusion and exclusion");
		out[key] = flag;
	}
	return keys.length > 0 ? out : undefined;
}

export function parsePopulate(raw: unknown): PopulateSpec[] {
	const s = typeof raw === "string" ? raw.trim() : undefined;
	let v = s !== undefined && !s.startsWith("[") && !s.startsWith("{") ? s.split(",") : parseJsonParam("populate", raw);
	if (v === undefined) return [];
	if (isPlainObject(v)) v = [v];
	if (!Array.isArray(v)) throw badRequest("populate must be a JSON array, a JSON object or a comma-separated list of paths");
	const entries = v.filter((e) => !(typeof e === "string" && e.trim() === ""));
	if (entries.length > MAX_POPULATE) throw badRequest(`populate accepts at most ${MAX_POPULATE} paths`);
	const specs = entries.map(populateSpec);
	const dup = specs.find((p, i) => specs.findIndex((q) => q.path === p.path) !== i);
	if (dup) throw badRequest(`populate path ${dup.path} is repeated`);
	return specs;
}

function populateSpec(e: unknown): PopulateSpec {
	if (typeof e === "string") return { path: checkField(e.trim()) };
	if (!isPlainObject(e)) throw badRequest("populate entries must be paths or {path, select, match} objects");
	for (const key of Object.keys(e)) if (!["path", "select", "match"].includes(key)) throw badRequest(`populate.${key} is not allowed`);
	if (typeof e.path !== "string") throw badRequest("populate.path must be a string");
	const spec: PopulateSpec = { path: checkField(e.path) };
	if (e.select !== undefined) {
		const sel = typeof e.select === "string" ? e.select.split(/[\s,]+/).filter(Boolean) : e.select;
		if (!Array.isArray(sel) || !sel.every((f) => typeof f === "string")) throw badRequest("populate.select must be an array or a space/comma-separated list of field names");
		if (sel.length > MAX_FIELDS) throw badRequest(`populate.select accepts at most ${MAX_FIELDS} fields`);
		if (sel.length > 0) spec.select = [...new Set(sel.map(checkField))];
	}
	if (e.match !== undefined) spec.match = parseFilter("populate.match", e.match);
	return spec;
}

export function parseZones(raw: unknown): string[] {
	// No zone asked (nearly every request): the default, without the parsing below.
	if (raw === undefined) return ["own", "share"];
	// Repeated parameters (`zones=own&zones=share`) arrive as an array.
	const list: unknown = raw === undefined ? [] : typeof raw === "string" ? [raw] : raw;
	if (!Array.isArray(list) || !list.every((z) => typeof z === "string")) throw badRequest("zones must be a comma-separated string");
	const zones: string[] = [];
	for (const zone of list
		.flatMap((z: string) => z.split(","))
		.map((z) => z.trim())
		.filter(Boolean)) {
		if (!ZONES.has(zone)) throw badRequest(`unknown zone ${zone}`);
		if (!zones.includes(zone)) zones.push(zone);
	}
	return zones.length > 0 ? zones : ["own", "share"];
}
