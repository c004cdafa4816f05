/**
 * Translation of a validated platform filter (lib/query-safety.ts, `id` already renamed to `_id`) into parameterised
 * SQL over a `(id text, doc jsonb)` table, with MongoDB's semantics (arrays included):
 *
 * - values only ever travel as bind parameters (`$n`); field names (validated identifiers, lib/query-safety.ts
 *   FIELD) are written into SQL string literals and jsonpath quoted keys, escaped;
 * - a top-level equality `{f: v}` is `doc @> {"f": v} OR doc @> {"f": [v]}` (the field, or an element of it, equals
 *   v), which the GIN `jsonb_path_ops` index serves: the zones (owner, shares, groups, clients), `ref`, any field;
 * - dotted paths and comparisons are SQL/JSON paths in lax mode (`$."a"."b" ? (@ > $v)`), which descend through
 *   arrays and compare element-wise like MongoDB; comparisons across types (a number against a string) match nothing,
 *   like MongoDB's type brackets;
 * - what SQL cannot say with exactly the same meaning is not guessed: `$regex` (RE2 semantics, lib/safe-regex.ts;
 *   PostgreSQL's own engine reads patterns differently, e.g. `\b`, and its worst case is not linear), `$elemMatch`,
 *   sub-document and array equality on a dotted path, comparisons with null or booleans. Such a node becomes TRUE in
 *   SQL (the SQL then selects a superset) and the query is marked inexact: the store evaluates the whole filter in
 *   JavaScript on the candidate rows (NeDB's matcher after the MongoDB normalisation, the same as the embedded
 *   store, with the RE2 matcher and its work budget), then sorts and pages there.
 */
import type { Filter } from "./types";

export class Params {
	readonly values: unknown[] = [];
	add(v: unknown): string {
		this.values.push(v);
		return `$${this.values.length}`;
	}
	json(v: unknown): string {
		return `${this.add(JSON.stringify(v))}::jsonb`;
	}
}

export interface Sql {
	sql: string;
	/** False: `sql` selects a superset; the filter must be evaluated on the rows in JavaScript. */
	exact: boolean;
}

const TRUE: Sql = { sql: "true", exact: false };
const ok = (sql: string): Sql => ({ sql, exact: true });

/** A SQL string literal of a (validated) field name. */
export function lit(s: string): string {
	if (s.includes("\u0000")) throw new Error("field names cannot contain NUL");
	return `'${s.replace(/'/g, "''")}'`;
}

const isNum = (s: string) => /^\d+$/.test(s);

/** The lax SQL/JSON path of a dotted field: `$."a"[0]."b"` (numeric segments index arrays). */
export function jsonPath(field: string): string {
	return (
		"$" +
		field
			.split(".")
			.map((s) => (isNum(s) ? `[${s}]` : `."${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`))
			.join("")
	);
}

/** The jsonb value at a field path, for ORDER BY and indexes (no array traversal). */
export function valueAt(field: string): string {
	const segs = field.split(".");
	if (segs.length === 1) return `(doc->${lit(field)})`;
	return `(doc#>${lit(`{${segs.map((s) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`).join(",")}}`)}::text[])`;
}

const isOperatorObject = (v: unknown): v is Record<string, unknown> =>
	typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof RegExp) && Object.keys(v).length > 0 && Object.keys(v).every((k) => k.startsWith("$"));

const isScalar = (v: unknown): v is string | number | boolean => typeof v === "string" || typeof v === "boolean" || (typeof v === "number" && Number.isFinite(v));

function and(parts: Sql[]): Sql {
	if (!parts.length) return ok("true");
	return { sql: parts.length === 1 ? parts[0].sql : `(${parts.map((p) => p.sql).join(" and ")})`, exact: parts.every((p) => p.exact) };
}

function or(parts: Sql[]): Sql {
	return { sql: `(${parts.map((p) => p.sql).join(" or ")})`, exact: parts.every((p) => p.exact) };
}

/** NOT keeps exactness only over an exact operand (the negation of a superset is not a superset). */
function not(p: Sql): Sql {
	return p.exact ? ok(`(not ${p.sql})`) : TRUE;
}

/**
 * Where a dotted path starts: the document, or for `f.N...` (N numeric: the grouping zone's `clients.0`) the N-th
 * element of an array `f`, or the key "N" of a sub-document `f`, as MongoDB reads it (lax SQL/JSON would also take a
 * scalar `f` for its own element 0). Undefined: a numeric segment deeper in the path, evaluated in JavaScript.
 */
function rooted(field: string): { base: string; rest: string } | undefined {
	const segs = field.split(".");
	const n = segs.findIndex(isNum);
	if (n === -1) return { base: "doc", rest: field };
	if (n !== 1) return undefined;
	const f = `(doc->${lit(segs[0])})`;
	const base = `(case jsonb_typeof(${f}) when 'array' then ${f}->${Number(segs[1])} when 'object' then ${f}->${lit(segs[1])} end)`;
	return { base, rest: segs.slice(2).join(".") };
}

function pathExists(field: string, p: Params, filter?: string, vars?: Record<string, unknown>): string | undefined {
	const r = rooted(field);
	if (!r) return undefined;
	const root = r.rest ? jsonPath(r.rest) : "$";
	const path = filter ? `${root} ? (${filter})` : root;
	const call = vars ? `jsonb_path_exists(${r.base}, ${p.add(path)}::jsonpath, ${p.json(vars)})` : `jsonb_path_exists(${r.base}, ${p.add(path)}::jsonpath)`;
	// A missing base (no such element) is no match, never SQL's unknown (which NOT would keep unknown).
	return r.base === "doc" ? call : `coalesce(${call}, false)`;
}

const sqlOf = (sql: string | undefined): Sql => (sql === undefined ? TRUE : ok(sql));

/** `{field: v}` with MongoDB's meaning: equal, or (arrays) an element equal; null also matches a missing field. */
function eq(field: string, v: unknown, p: Params): Sql {
	if (field === "_id") {
		if (typeof v === "string") return ok(`(id = ${p.add(v)})`);
		return ok("false");
	}
	const top = !field.includes(".");
	if (v === null) {
		if (top) {
			// One extraction of the field per row (each `doc->...` of a compressed row decompresses it again): missing
			// (SQL null) and JSON null match, an array when it holds a null, anything else not.
			const x = valueAt(field);
			return ok(`(case coalesce(jsonb_typeof(${x}), 'null') when 'null' then true when 'array' then ${x} @> '[null]'::jsonb else false end)`);
		}
		const has = pathExists(field, p);
		const isNull = pathExists(field, p, "@ == null");
		if (has === undefined || isNull === undefined) return TRUE;
		// Also missing in one of the sub-documents an array holds (`{lines: [{sku: 1}, {}]}` for `lines.sku`).
		const segs = field.split(".");
		const last = segs.pop()!;
		const parent = isNum(last) ? undefined : pathExists(segs.join("."), p, `!exists(@."${last.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}")`);
		if (parent === undefined && !isNum(last)) return TRUE;
		return ok(`(not ${has} or ${isNull}${parent ? ` or ${parent}` : ""})`);
	}
	if (isScalar(v)) {
		if (top) return ok(`(doc @> ${p.json({ [field]: v })} or doc @> ${p.json({ [field]: [v] })})`);
		return sqlOf(pathExists(field, p, "@ == $v", { v }));
	}
	if (v instanceof RegExp) return TRUE;
	if (top && (Array.isArray(v) || (typeof v === "object" && v !== null))) {
		const x = valueAt(field);
		const j = p.json(v);
		// The value itself, or an element of an array field (jsonb equality: key order does not matter).
		return ok(`coalesce(${x} = ${j} or (jsonb_typeof(${x}) = 'array' and exists (select 1 from jsonb_array_elements(${x}) e where e = ${j})), false)`);
	}
	return TRUE;
}

const CMP: Record<string, string> = { $gt: ">", $gte: ">=", $lt: "<", $lte: "<=" };

function operators(field: string, ops: Record<string, unknown>, p: Params): Sql {
	const parts: Sql[] = [];
	for (const [op, v] of Object.entries(ops)) {
		switch (op) {
			case "$eq":
				parts.push(eq(field, v, p));
				break;
			case "$ne":
				parts.push(not(eq(field, v, p)));
				break;
			case "$in":
				parts.push(Array.isArray(v) ? (v.length ? inList(field, v, p) : ok("false")) : TRUE);
				break;
			case "$nin":
				parts.push(Array.isArray(v) ? (v.length ? not(inList(field, v, p)) : ok("true")) : TRUE);
				break;
			case "$gt":
			case "$gte":
			case "$lt":
			case "$lte":
				if (field === "_id") parts.push(typeof v === "string" ? ok(`(id ${CMP[op]} ${p.add(v)})`) : typeof v === "number" ? ok("false") : TRUE);
				else if (typeof v === "string" || (typeof v === "number" && Number.isFinite(v))) parts.push(sqlOf(pathExists(field, p, `@ ${CMP[op]} $v`, { v })));
				else parts.push(TRUE);
				break;
			case "$exists":
				if (field === "_id") parts.push(ok(v ? "true" : "false"));
				else {
					const has = field.includes(".") ? pathExists(field, p) : `(doc ? ${lit(field)})`;
					parts.push(has === undefined ? TRUE : ok(v ? has : `(not ${has})`));
				}
				break;
			case "$size":
				if (!field.includes(".") && Number.isInteger(v)) {
					const x = valueAt(field);
					parts.push(ok(`coalesce(jsonb_typeof(${x}) = 'array' and jsonb_array_length(${x}) = ${p.add(v)}::int, false)`));
				} else parts.push(TRUE);
				break;
			case "$not":
				parts.push(isOperatorObject(v) ? not(operators(field, v, p)) : TRUE);
				break;
			default:
				// $regex, $elemMatch, anything else: evaluated in JavaScript (which refuses what it does not know).
				parts.push(TRUE);
		}
	}
	return and(parts);
}

function inList(field: string, values: unknown[], p: Params): Sql {
	if (field === "_id") {
		const ids = values.filter((x): x is string => typeof x === "string");
		return ok(ids.length ? `(id = any(${p.add(ids)}::text[]))` : "false");
	}
	return or(values.map((x) => eq(field, x, p)));
}

/** The SQL condition of a store filter (already in store form: `_id`, not `id`). */
export function whereOf(q: Filter, p: Params): Sql {
	const parts: Sql[] = [];
	for (const [k, v] of Object.entries(q)) {
		if (k === "$and") parts.push(Array.isArray(v) && v.length ? and(v.map((x) => whereOf(x as Filter, p))) : TRUE);
		else if (k === "$or") parts.push(Array.isArray(v) && v.length ? or(v.map((x) => whereOf(x as Filter, p))) : TRUE);
		else if (k === "$not") parts.push(v && typeof v === "object" && !Array.isArray(v) && !(v instanceof RegExp) ? not(whereOf(v as Filter, p)) : TRUE);
		else if (k.startsWith("$")) parts.push(TRUE);
		else if (isOperatorObject(v)) parts.push(operators(k, v, p));
		else parts.push(eq(k, v, p));
	}
	return and(parts);
}

/** One key of a store sort in SQL: the expression and its direction (with where missing values go). */
export interface SortKey {
	expr: string;
	dir: string;
}

/**
 * The keys of a store sort: jsonb order per field (missing first ascending, like MongoDB), then `id` in the direction
 * of the first key (ties in a stable order; `created_at` descending then walks its index backwards).
 */
export function sortKeys(sort: Record<string, 1 | -1> | undefined): SortKey[] {
	const keys: SortKey[] = [];
	let hasId = false;
	const first = Object.values(sort ?? {})[0] ?? 1;
	for (const [f, dir] of Object.entries(sort ?? {})) {
		if (f === "_id") {
			hasId = true;
			keys.push({ expr: "id", dir: dir === -1 ? "desc" : "asc" });
		} else keys.push({ expr: valueAt(f), dir: dir === -1 ? "desc nulls last" : "asc nulls first" });
	}
	if (!hasId) keys.push({ expr: "id", dir: first === -1 ? "desc" : "asc" });
	return keys;
}

/** ORDER BY of a store sort (sortKeys). */
export function orderOf(sort: Record<string, 1 | -1> | undefined): string {
	return sortKeys(sort)
		.map((k) => `${k.expr} ${k.dir}`)
		.join(", ");
}

/**
 * The form of a filter for the JavaScript matcher (NeDB's, after its MongoDB normalisation) with MongoDB's meaning of
 * null, which the SQL side has: `{f: null}` also matches a missing field (NeDB's does not), so do `$in: [null]`, and
 * `$ne: null` / `$nin: [null]` exclude it; a field-level `$not` (MongoDB's form) becomes the query-level one NeDB has.
 */
export function forMatcher(q: Filter): Filter {
	const out: Filter = {};
	const and: Filter[] = [];
	const nullEq = (k: string): Filter => ({ $or: [{ [k]: null }, { [k]: { $exists: false } }] });
	for (const [k, v] of Object.entries(q)) {
		if ((k === "$and" || k === "$or") && Array.isArray(v)) out[k] = v.map((x) => forMatcher(x as Filter));
		else if (k === "$not" && v && typeof v === "object" && !Array.isArray(v) && !(v instanceof RegExp)) out[k] = forMatcher(v as Filter);
		else if (k.startsWith("$")) out[k] = v;
		else if (v === null) and.push(nullEq(k));
		else if (isOperatorObject(v)) {
			const rest: Record<string, unknown> = { ...v };
			if ("$ne" in rest && rest.$ne === null) {
				delete rest.$ne;
				and.push({ $not: nullEq(k) });
			}
			if (Array.isArray(rest.$in) && rest.$in.includes(null)) {
				const vals = rest.$in.filter((x) => x !== null);
				delete rest.$in;
				and.push(vals.length ? { $or: [{ [k]: { $in: vals } }, nullEq(k)] } : nullEq(k));
			}
			if (Array.isArray(rest.$nin) && rest.$nin.includes(null)) {
				rest.$nin = rest.$nin.filter((x) => x !== null);
				if (!(rest.$nin as unknown[]).length) delete rest.$nin;
				and.push({ $not: nullEq(k) });
			}
			if ("$not" in rest) {
				const n = rest.$not;
				delete rest.$not;
				and.push({ $not: forMatcher({ [k]: n instanceof RegExp ? { $regex: n } : n }) });
			}
			if (Object.keys(rest).length) out[k] = rest;
		} else out[k] = v;
	}
	return and.length ? { $and: [out, ...and] } : out;
}

/**
 * The statement and its values, parameters renumbered: a node that fell back to JavaScript (TRUE) leaves values no
 * placeholder refers to, which PostgreSQL refuses.
 */
export function bind(sql: string, p: Params): [string, unknown[]] {
	const values: unknown[] = [];
	const map = new Map<number, number>();
	const text = sql.replace(/\$(\d+)/g, (_m, n: string) => {
		let to = map.get(Number(n));
		if (to === undefined) {
			values.push(p.values[Number(n) - 1]);
			map.set(Number(n), (to = values.length));
		}
		return `$${to}`;
	});
	return [text, values];
}
