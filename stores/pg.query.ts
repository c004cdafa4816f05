/**
 * Translation of a validated platform filter (lib/query-safety.ts) into parameterised
 * SQL over a `(id text, doc jsonb)` table, with the meaning of the platform's query language (lib/query.ts, arrays
 * included; test/integration/query-sql.property.test.ts compares the two on random documents and filters):
 *
 * - values only ever travel as bind parameters (`$n`); field names (validated identifiers, lib/query-safety.ts
 *   FIELD) are written into SQL string literals and jsonpath quoted keys, escaped;
 * - a top-level equality `{f: v}` is `doc @> {"f": v} OR doc @> {"f": [v]}` (the field, or an element of it, equals
 *   v), which the GIN `jsonb_path_ops` index serves: the zones (owner, shares, groups, clients), `ref`, any field;
 * - dotted paths and comparisons are SQL/JSON paths in lax mode (`$."a"."b" ? (@ > $v)`), which descend through
 *   arrays one level and compare element-wise; comparisons across types (a number against a string) match nothing;
 * - what SQL cannot say with exactly the same meaning is not guessed: `$regex` (RE2 semantics, lib/safe-regex.ts;
 *   PostgreSQL's own engine reads patterns differently, e.g. `\b`, and its worst case is not linear), `$elemMatch`,
 *   sub-document and array equality on a dotted path, comparisons with null or booleans. Such a node becomes TRUE in
 *   SQL (the SQL then selects a superset) and the query is marked inexact: the store evaluates the whole filter in
 *   JavaScript on the candidate rows (lib/query.ts, with the RE2 matcher and its work budget), in the SQL's order.
 */
import { elementTests, isOperatorObject } from "../lib/query";
import type { Filter } from "./types";

export class Params {
	readonly values: unknown[] = [];
	/** Patterns given to PostgreSQL's `~` in this statement (see MAX_SQL_PATTERNS). */
	patterns = 0;
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

/** The jsonb value at a field path of `base` (the row's document), for ORDER BY and indexes (no array traversal). */
export function valueAt(field: string, base = "doc"): string {
	const segs = field.split(".");
	if (segs.length === 1) return `(${base}->${lit(field)})`;
	return `(${base}#>${lit(`{${segs.map((s) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`).join(",")}}`)}::text[])`;
}

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
 * element of an array `f`, or the key "N" of a sub-document `f`, as lib/query.ts reads it (lax SQL/JSON would also take a
 * scalar `f` for its own element 0). Undefined: a numeric segment deeper in the path, evaluated in JavaScript.
 */
function rooted(field: string, doc: string): { base: string; rest: string } | undefined {
	const segs = field.split(".");
	const n = segs.findIndex(isNum);
	if (n === -1) return { base: doc, rest: field };
	if (n !== 1) return undefined;
	const f = `(${doc}->${lit(segs[0])})`;
	const base = `(case jsonb_typeof(${f}) when 'array' then ${f}->${Number(segs[1])} when 'object' then ${f}->${lit(segs[1])} end)`;
	return { base, rest: segs.slice(2).join(".") };
}

function pathExists(field: string, p: Params, doc: string, filter?: string, vars?: Record<string, unknown>): string | undefined {
	const r = rooted(field, doc);
	if (!r) return undefined;
	const root = r.rest ? jsonPath(r.rest) : "$";
	const path = filter ? `${root} ? (${filter})` : root;
	// (A filter's value that is an array is taken element by element, one level, by the lax mode; a comparison would
	// unwrap an element that is itself an array once more, so every test below first asks for a value that is not one.)
	const call = vars ? `jsonb_path_exists(${r.base}, ${p.add(path)}::jsonpath, ${p.json(vars)})` : `jsonb_path_exists(${r.base}, ${p.add(path)}::jsonpath)`;
	// A missing base (no such element) is no match, never SQL's unknown (which NOT would keep unknown).
	return r.base === doc ? call : `coalesce(${call}, false)`;
}

/** The SQL/JSON filter test of an item that is not an array (see pathExists). */
const NOT_ARRAY = '@.type() != "array"';

const sqlOf = (sql: string | undefined): Sql => (sql === undefined ? TRUE : ok(sql));

/**
 * `{field: v}` with the query language's meaning: equal, or (arrays) an element equal; null also matches a missing field. `doc`:
 * the document the field is read from (the row's, or an array element's under $elemMatch).
 */
function eq(field: string, v: unknown, p: Params, doc: string): Sql {
	if (field === "id" && doc === "doc") {
		if (typeof v === "string") return ok(`(id = ${p.add(v)})`);
		return ok("false");
	}
	const top = !field.includes(".");
	if (v === null) {
		if (top) {
			// One extraction of the field per row (each `doc->...` of a compressed row decompresses it again): missing
			// (SQL null) and JSON null match, an array when it holds a null, anything else not.
			const x = valueAt(field, doc);
			return ok(`(case coalesce(jsonb_typeof(${x}), 'null') when 'null' then true when 'array' then ${x} @> '[null]'::jsonb else false end)`);
		}
		const has = pathExists(field, p, doc);
		const isNull = pathExists(field, p, doc, `${NOT_ARRAY} && @ == null`);
		if (has === undefined || isNull === undefined) return TRUE;
		// Also missing in one of the sub-documents an array holds (`{lines: [{sku: 1}, {}]}` for `lines.sku`).
		const segs = field.split(".");
		const last = segs.pop()!;
		const parent = isNum(last) ? undefined : pathExists(segs.join("."), p, doc, `@.type() != "object" || !exists(@."${last.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}")`);
		if (parent === undefined && !isNum(last)) return TRUE;
		return ok(`(not ${has} or ${isNull}${parent ? ` or ${parent}` : ""})`);
	}
	if (isScalar(v)) {
		if (top) return ok(`(${doc} @> ${p.json({ [field]: v })} or ${doc} @> ${p.json({ [field]: [v] })})`);
		return sqlOf(pathExists(field, p, doc, `${NOT_ARRAY} && @ == $v`, { v }));
	}
	if (v instanceof RegExp) return regex(field, v, p, doc);
	if (top && (Array.isArray(v) || (typeof v === "object" && v !== null))) {
		const x = valueAt(field, doc);
		const j = p.json(v);
		// The value itself, or an element of an array field (jsonb equality: key order does not matter).
		return ok(`coalesce(${x} = ${j} or (jsonb_typeof(${x}) = 'array' and exists (select 1 from jsonb_array_elements(${x}) e where e = ${j})), false)`);
	}
	return TRUE;
}

const CMP: Record<string, string> = { $gt: ">", $gte: ">=", $lt: "<", $lte: "<=" };

function operators(field: string, ops: Record<string, unknown>, p: Params, doc: string): Sql {
	const parts: Sql[] = [];
	const rowId = field === "id" && doc === "doc";
	for (const [op, v] of Object.entries(ops)) {
		switch (op) {
			case "$eq":
				parts.push(eq(field, v, p, doc));
				break;
			case "$ne":
				parts.push(not(eq(field, v, p, doc)));
				break;
			case "$in":
				parts.push(Array.isArray(v) ? (v.length ? inList(field, v, p, doc) : ok("false")) : TRUE);
				break;
			case "$nin":
				parts.push(Array.isArray(v) ? (v.length ? not(inList(field, v, p, doc)) : ok("true")) : TRUE);
				break;
			case "$gt":
			case "$gte":
			case "$lt":
			case "$lte":
				if (rowId) parts.push(typeof v === "string" ? ok(`(id ${CMP[op]} ${p.add(v)})`) : typeof v === "number" ? ok("false") : TRUE);
				else if (typeof v === "string" || (typeof v === "number" && Number.isFinite(v))) parts.push(sqlOf(pathExists(field, p, doc, `${NOT_ARRAY} && @ ${CMP[op]} $v`, { v })));
				else parts.push(TRUE);
				break;
			case "$exists":
				if (rowId) parts.push(ok(v ? "true" : "false"));
				else {
					const has = field.includes(".") ? pathExists(field, p, doc) : `(${doc} ? ${lit(field)})`;
					parts.push(has === undefined ? TRUE : ok(v ? has : `(not ${has})`));
				}
				break;
			case "$size":
				if (!field.includes(".") && Number.isInteger(v)) {
					const x = valueAt(field, doc);
					parts.push(ok(`coalesce(jsonb_typeof(${x}) = 'array' and jsonb_array_length(${x}) = ${p.add(v)}::int, false)`));
				} else parts.push(TRUE);
				break;
			case "$not":
				parts.push(isOperatorObject(v) ? not(operators(field, v, p, doc)) : v instanceof RegExp ? not(regex(field, v, p, doc)) : TRUE);
				break;
			case "$regex":
				parts.push(v instanceof RegExp ? regex(field, v, p, doc) : TRUE);
				break;
			case "$elemMatch":
				parts.push(elemMatch(field, v, p, doc));
				break;
			default:
				// Anything else: evaluated in JavaScript (which refuses what it does not know).
				parts.push(TRUE);
		}
	}
	return and(parts);
}

function inList(field: string, values: unknown[], p: Params, doc: string): Sql {
	if (field === "id" && doc === "doc") {
		const ids = values.filter((x): x is string => typeof x === "string");
		return ok(ids.length ? `(id = any(${p.add(ids)}::text[]))` : "false");
	}
	return or(values.map((x) => eq(field, x, p, doc)));
}

/**
 * Patterns one statement gives PostgreSQL: it keeps the last 32 compiled patterns of a connection, so a filter of more
 * would compile them again for every row (an $or of 50 patterns over 60 000 rows: 30 s of the server's time). Beyond
 * this number, patterns are matched in JavaScript (with the query's work budget).
 */
const MAX_SQL_PATTERNS = 16;

/**
 * `$regex` of a top-level field (or `id`) as PostgreSQL's `~` when the pattern is in the subset both engines read
 * alike (pgPattern): a string, or a string element of an array, matches. Anything else is matched in JavaScript.
 */
function regex(field: string, re: RegExp, p: Params, doc: string): Sql {
	const pattern = p.patterns < MAX_SQL_PATTERNS ? pgPattern(re.source, re.flags) : undefined;
	if (pattern === undefined) return TRUE;
	p.patterns++;
	if (field === "id" && doc === "doc") return ok(`(id ~ ${p.add(pattern)})`);
	if (field.includes(".")) return TRUE;
	return ok(matchesPattern(valueAt(field, doc), p.add(pattern), "e"));
}

/** A jsonb value `x` that is a string matching the pattern `re$`, or an array holding one (`e`: the elements' alias). */
const matchesPattern = (x: string, re$: string, e: string) =>
	`coalesce(case jsonb_typeof(${x}) when 'string' then (${x} #>> '{}') ~ ${re$} ` +
	`when 'array' then exists (select 1 from jsonb_array_elements(${x}) ${e} where jsonb_typeof(${e}) = 'string' and (${e} #>> '{}') ~ ${re$}) else false end, false)`;

/**
 * `{field: {$elemMatch: {...}}}` on a top-level field. The query form: an element of the array that is a sub-document
 * matching the sub-query, as exact as the sub-query's SQL. The operator form of element tests (elementTests): an element
 * that is not a sub-document and passes every test; other operator forms are evaluated in JavaScript.
 */
function elemMatch(field: string, v: unknown, p: Params, doc: string): Sql {
	if (field.includes(".") || (field === "id" && doc === "doc") || !v || typeof v !== "object" || Array.isArray(v)) return TRUE;
	const x = valueAt(field, doc);
	// Nested $elemMatch get their own alias; siblings may share one (separate subqueries). Stable text: named statements.
	const e = doc === "doc" ? "el" : `${doc}_el`;
	if (isOperatorObject(v)) return elementTest(x, v, p, e);
	const sub = whereOf(v as Filter, p, e);
	return {
		sql: `coalesce(jsonb_typeof(${x}) = 'array' and exists (select 1 from jsonb_array_elements(${x}) ${e} where jsonb_typeof(${e}) = 'object' and ${sub.sql}), false)`,
		exact: sub.exact && positive(v as Filter),
	};
}

/**
 * The operator form of `$elemMatch` on the array `x`, as the JavaScript matcher reads it: some element that is not a
 * sub-document passes all the tests, an element that is itself an array when one of its own elements does (SQL/JSON's
 * lax filter over an element unwraps it). Comparisons of strings or numbers and `$in` are one SQL/JSON filter; a lone
 * `$regex` of the translated subset is PostgreSQL's `~`. Anything else (a comparison with a boolean or null, `$regex`
 * beside other tests, a pattern outside the subset) is evaluated in JavaScript.
 */
function elementTest(x: string, tests: Record<string, unknown>, p: Params, e: string): Sql {
	if (!elementTests(tests)) return TRUE;
	const isArray = (cond: string) => ok(`coalesce(jsonb_typeof(${x}) = 'array' and ${cond}, false)`);
	if ("$regex" in tests) {
		const re = tests.$regex;
		const pattern = Object.keys(tests).length === 1 && re instanceof RegExp && p.patterns < MAX_SQL_PATTERNS ? pgPattern(re.source, re.flags) : undefined;
		if (pattern === undefined) return TRUE;
		p.patterns++;
		const re$ = p.add(pattern);
		return isArray(`exists (select 1 from jsonb_array_elements(${x}) ${e} where ${matchesPattern(e, re$, `${e}_in`)})`);
	}
	const vars: Record<string, unknown> = {};
	const bound = (v: unknown) => {
		const name = `v${Object.keys(vars).length}`;
		vars[name] = v;
		return `$${name}`;
	};
	const conds: string[] = [];
	for (const [op, v] of Object.entries(tests)) {
		if (op === "$in") {
			if (!Array.isArray(v) || !v.every((y) => y === null || isScalar(y))) return TRUE;
			if (!v.length) return ok("false");
			conds.push(`(${v.map((y) => `@ == ${bound(y)}`).join(" || ")})`);
		} else if (typeof v === "string" || (typeof v === "number" && Number.isFinite(v))) conds.push(`@ ${CMP[op]} ${bound(v)}`);
		else return TRUE;
	}
	return isArray(`jsonb_path_exists(${x}, ${p.add(`$[*] ? (${[NOT_ARRAY, ...conds].join(" && ")})`)}::jsonpath, ${p.json(vars)})`);
}

/**
 * The sub-queries of $elemMatch whose SQL is taken as exact: equalities to non-null scalars, comparisons and $in of
 * such values, $regex, under $and/$or (the forms the property test draws inside $elemMatch). Anything else still
 * selects in SQL, as a superset, and is decided in JavaScript.
 */
function positive(q: Filter): boolean {
	const value = (v: unknown) => isScalar(v) || v instanceof RegExp;
	return Object.entries(q).every(([k, v]) => {
		if (k === "$and" || k === "$or") return Array.isArray(v) && v.every((x) => positive(x as Filter));
		if (k.startsWith("$")) return false;
		if (!isOperatorObject(v)) return value(v);
		return Object.entries(v).every(([op, x]) => (op in CMP || op === "$regex" ? value(x) : op === "$in" && Array.isArray(x) && x.every(value)));
	});
}

/**
 * The SQL condition of a store filter (a platform filter: `id` names the row's `id` column). `doc`: the jsonb the fields are read
 * from (the row's document; an array element under $elemMatch, where `id` is a field like any other).
 */
export function whereOf(q: Filter, p: Params, doc = "doc"): Sql {
	const parts: Sql[] = [];
	for (const [k, v] of Object.entries(q)) {
		if (k === "$and") parts.push(Array.isArray(v) && v.length ? and(v.map((x) => whereOf(x as Filter, p, doc))) : TRUE);
		else if (k === "$or") parts.push(Array.isArray(v) && v.length ? or(v.map((x) => whereOf(x as Filter, p, doc))) : TRUE);
		else if (k === "$not") parts.push(v && typeof v === "object" && !Array.isArray(v) && !(v instanceof RegExp) ? not(whereOf(v as Filter, p, doc)) : TRUE);
		else if (k.startsWith("$")) parts.push(TRUE);
		else if (isOperatorObject(v)) parts.push(operators(k, v, p, doc));
		else parts.push(eq(k, v, p, doc));
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
		if (f === "id") {
			hasId = true;
			keys.push({ expr: "id", dir: dir === -1 ? "desc" : "asc" });
		} else keys.push({ expr: valueAt(f), dir: dir === -1 ? "desc nulls last" : "asc nulls first" });
	}
	if (!hasId) keys.push({ expr: "id", dir: first === -1 ? "desc" : "asc" });
	return keys;
}

/** ORDER BY of a store sort (sortKeys). */
export function orderOf(sort: Record<string, 1 | -1> | undefined): string {
	return orderOfKeys(sortKeys(sort));
}

/** ORDER BY of the keys of a sort. */
export const orderOfKeys = (keys: SortKey[]): string => keys.map((k) => `${k.expr} ${k.dir}`).join(", ");

/**
 * The sort keys' values of each row, for a keyset: `[value]`, or `[]` where the value is missing (SQL null; a JSON
 * null is `[null]`). Columns `k0`, `k1`... in the order of `keys`.
 */
export function keyColumns(keys: SortKey[]): string {
	return keys.map((k, i) => `, case when ${k.expr} is null then '[]'::jsonb else jsonb_build_array(${k.expr}) end as k${i}`).join("");
}

/**
 * Rows strictly after a keyset in the order of `keys` (values as keyColumns reads them): jsonb comparisons, which
 * follow the same order as ORDER BY, with SQL nulls (missing) first ascending and last descending. The usual sort (one
 * field, then `id`, one direction) is a row comparison, which walks the sort's index from the keyset on.
 */
export function afterOf(keys: SortKey[], values: Array<[unknown] | []>, p: Params): string {
	const at = (i: number) => (keys[i].expr === "id" ? p.add(values[i][0]) : p.json(values[i][0]));
	const desc = (i: number) => keys[i].dir.startsWith("desc");
	if (keys.length !== values.length) throw new Error("keyset of another sort");
	if (keys.length === 2 && keys[1].expr === "id" && keys[0].expr !== "id" && values[0].length && desc(0) === desc(1))
		return desc(0) ? `((${keys[0].expr}, id) < (${at(0)}, ${at(1)}) or ${keys[0].expr} is null)` : `((${keys[0].expr}, id) > (${at(0)}, ${at(1)}))`;
	const same = (i: number) => (values[i].length ? `${keys[i].expr} = ${at(i)}` : `${keys[i].expr} is null`);
	const later = (i: number) => {
		if (keys[i].expr === "id") return `id ${desc(i) ? "<" : ">"} ${at(i)}`;
		if (!values[i].length) return desc(i) ? "false" : `${keys[i].expr} is not null`;
		return desc(i) ? `(${keys[i].expr} < ${at(i)} or ${keys[i].expr} is null)` : `${keys[i].expr} > ${at(i)}`;
	};
	return `(${keys.map((_, i) => `(${[...keys.slice(0, i).map((_k, j) => same(j)), later(i)].join(" and ")})`).join(" or ")})`;
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

/** A pattern outside the subset pgPattern translates. */
class Untranslated extends Error {}

/** Repetition counts PostgreSQL accepts (RE_DUP_MAX), and the longest translated pattern. */
const MAX_REPEAT = 255;
const MAX_PATTERN = 4096;

/** A code point as a PostgreSQL ARE character-entry escape (valid inside and outside brackets). */
const entry = (cp: number) => (cp <= 0xffff ? `\\u${cp.toString(16).padStart(4, "0")}` : `\\U${cp.toString(16).padStart(8, "0")}`);
const code = (c: string) => c.codePointAt(0)!;
const isLetter = (cp: number) => (cp >= 0x41 && cp <= 0x5a) || (cp >= 0x61 && cp <= 0x7a);

/** RE2's Perl classes (ASCII only): as code point ranges. */
const PERL: Record<string, Array<[number, number]>> = {
	d: [[0x30, 0x39]],
	w: [
		[0x30, 0x39],
		[0x41, 0x5a],
		[0x5f, 0x5f],
		[0x61, 0x7a],
	],
	// RE2's \s: tab, newline, form feed, carriage return, space (not \v, unlike PostgreSQL's).
	s: [
		[0x09, 0x0a],
		[0x0c, 0x0d],
		[0x20, 0x20],
	],
};
const SIMPLE_ESCAPES: Record<string, number> = { n: 0x0a, t: 0x09, r: 0x0d, f: 0x0c, v: 0x0b };

/**
 * The PostgreSQL form (for `~`, an ARE) of an RE2 pattern and its flags (`i`, `m`, `s`), or undefined when the pattern
 * is outside the subset whose meaning both engines share and which PostgreSQL matches without blowing up:
 *
 * - literals, `.`, `^`, `$`, `\A`, `\z`, classes `[...]`/`[^...]` of characters and ranges, `\d \w \s` (and, outside
 *   classes, `\D \W \S`), `\n \t \r \f \v`, escaped punctuation; groups `(...)`, `(?:...)`, named groups; alternation;
 *   `* + ? {n} {n,} {n,m}` (lazy forms: a match is a match) up to 255, never nested (a quantified group holds none);
 * - every character is written as an escape or a plain ASCII letter or digit, so nothing is read as PostgreSQL syntax
 *   RE2 does not have; Perl classes become explicit ASCII classes (PostgreSQL's follow the locale);
 * - `.` without `s` excludes only the newline, as in RE2 (PostgreSQL's default `.` matches it); `m` is PostgreSQL's
 *   `(?w)` (`^`/`$` at line ends only); `i` spells out each letter's RE2 case folding (`k` also matches the Kelvin sign),
 *   so a pattern under `i` with non-ASCII letters, or a class with anything but letters, is not translated.
 *
 * Left out (matched in JavaScript by RE2): `\b`, `\B`, `\p{..}`, `\Q..\E`, `\x..`, octal, inline flags, POSIX classes,
 * empty alternatives, nested quantifiers, counts above 255.
 */
export function pgPattern(source: string, flags: string): string | undefined {
	const fold = flags.includes("i");
	const dotAll = flags.includes("s");
	const chars = [...source];
	let i = 0;
	const peek = () => chars[i];
	const fail = (): never => {
		throw new Untranslated();
	};

	/** A character (code point) as an atom. */
	function literal(cp: number): string {
		if (fold && isLetter(cp)) return ranges([[cp, cp]], false);
		if (fold && cp > 0x7f && String.fromCodePoint(cp).toLowerCase() !== String.fromCodePoint(cp).toUpperCase()) fail();
		return (cp >= 0x30 && cp <= 0x39) || isLetter(cp) ? String.fromCodePoint(cp) : entry(cp);
	}

	/** A class of code point ranges; under `i`, each letter's (or range of letters') RE2 case folding, then negated. */
	function ranges(list: Array<[number, number]>, negate: boolean): string {
		const out: Array<[number, number]> = [];
		for (const [lo, hi] of list) {
			if (!fold) out.push([lo, hi]);
			else if (isLetter(lo) && isLetter(hi) && lo >> 5 === hi >> 5) {
				out.push([lo | 0x20, hi | 0x20], [(lo | 0x20) - 0x20, (hi | 0x20) - 0x20]);
				if ((lo | 0x20) <= 0x6b && (hi | 0x20) >= 0x6b) out.push([0x212a, 0x212a]);
				if ((lo | 0x20) <= 0x73 && (hi | 0x20) >= 0x73) out.push([0x17f, 0x17f]);
			} else if (hi > 0x7f || [...Array(hi - lo + 1)].some((_, k) => isLetter(lo + k))) fail();
			else out.push([lo, hi]);
		}
		return `[${negate ? "^" : ""}${out.map(([lo, hi]) => (lo === hi ? entry(lo) : `${entry(lo)}-${entry(hi)}`)).join("")}]`;
	}

	/** After a backslash: a character, or a class of ranges. */
	function escape(inClass: boolean): { cp: number } | { ranges: Array<[number, number]>; negate: boolean } | { anchor: string } {
		const c = chars[i++] ?? fail();
		if (c in SIMPLE_ESCAPES) return { cp: SIMPLE_ESCAPES[c] };
		const lower = c.toLowerCase();
		if (lower in PERL) {
			if (c !== lower && inClass) fail();
			return { ranges: PERL[lower], negate: c !== lower };
		}
		if (!inClass && c === "A") return { anchor: "\\A" };
		if (!inClass && c === "z") return { anchor: "\\Z" };
		const cp = code(c);
		// Escaped punctuation is itself; a backslash before a letter or digit means something else (\b, \p, \1, \x...).
		if (cp < 0x80 && !/[0-9A-Za-z]/.test(c)) return { cp };
		return fail();
	}

	function bracket(): string {
		const negate = peek() === "^";
		if (negate) i++;
		if (peek() === "]") fail();
		const list: Array<[number, number]> = [];
		const one = (): number => {
			const c = chars[i++] ?? fail();
			if (c === "[" && peek() === ":") fail();
			if (c !== "\\") return code(c);
			const e = escape(true);
			if ("cp" in e) return e.cp;
			if ("ranges" in e) {
				list.push(...e.ranges);
				return -1;
			}
			return fail();
		};
		while (peek() !== "]") {
			if (peek() === undefined) fail();
			const lo = one();
			if (lo < 0) continue;
			if (peek() === "-" && chars[i + 1] !== "]" && chars[i + 1] !== undefined) {
				i++;
				const hi = one();
				if (hi < 0 || hi < lo) fail();
				list.push([lo, hi]);
			} else list.push([lo, lo]);
		}
		i++;
		return ranges(list, negate);
	}

	/** One atom: its text and whether it holds a quantifier (a quantified group may not). */
	function atom(): { text: string; quantified: boolean; anchor?: boolean } | undefined {
		const c = peek();
		if (c === undefined || c === "|" || c === ")") return undefined;
		i++;
		switch (c) {
			case "(": {
				if (peek() === "?") {
					i++;
					if (peek() === ":") i++;
					else if (peek() === "P" || peek() === "<") {
						if (peek() === "P") i++;
						if (chars[i++] !== "<") fail();
						while (peek() !== ">") if (!/[A-Za-z0-9_]/.test(chars[i++] ?? fail())) fail();
						i++;
					} else fail();
				}
				const inner = alternation();
				if (chars[i++] !== ")" || inner.text === "") fail();
				return { text: `(?:${inner.text})`, quantified: inner.quantified };
			}
			case "[":
				return { text: bracket(), quantified: false };
			case ".":
				return { text: dotAll ? "." : `[^${entry(0x0a)}]`, quantified: false };
			case "^":
			case "$":
				return { text: c, quantified: false, anchor: true };
			case "\\": {
				const e = escape(false);
				if ("anchor" in e) return { text: e.anchor, quantified: false, anchor: true };
				if ("ranges" in e) return { text: ranges(e.ranges, e.negate), quantified: false };
				return { text: literal(e.cp), quantified: false };
			}
			case "*":
			case "+":
			case "?":
			case "{":
				return fail();
			default:
				return { text: literal(code(c)), quantified: false };
		}
	}

	/** A quantifier after an atom, or "". */
	function quantifier(): string {
		const c = peek();
		let q = "";
		if (c === "*" || c === "+" || c === "?") {
			i++;
			q = c;
		} else if (c === "{") {
			const m = /^\{(\d{1,4})(,(\d{0,4}))?\}/.exec(chars.slice(i, i + 12).join(""));
			if (!m) return fail();
			const lo = Number(m[1]);
			const hi = m[3] ? Number(m[3]) : undefined;
			if (lo > MAX_REPEAT || (hi !== undefined && (hi > MAX_REPEAT || hi < lo))) fail();
			i += m[0].length;
			q = m[0];
		} else return "";
		// Lazy or greedy, a match is a match.
		if (peek() === "?") i++;
		if (peek() === "*" || peek() === "+" || peek() === "?" || peek() === "{") fail();
		return q;
	}

	function sequence(): { text: string; quantified: boolean } {
		let text = "";
		let quantified = false;
		for (let a = atom(); a; a = atom()) {
			const q = quantifier();
			if (q && (a.anchor || a.quantified)) fail();
			text += a.text + q;
			quantified ||= a.quantified || q !== "";
		}
		return { text, quantified };
	}

	function alternation(): { text: string; quantified: boolean } {
		const branches = [sequence()];
		while (peek() === "|") {
			i++;
			branches.push(sequence());
		}
		if (branches.length > 1 && branches.some((b) => b.text === "")) fail();
		return { text: branches.map((b) => b.text).join("|"), quantified: branches.some((b) => b.quantified) };
	}

	try {
		const out = alternation();
		if (i !== chars.length) return undefined;
		const text = (flags.includes("m") ? "(?w)" : "") + out.text;
		return text.length > MAX_PATTERN ? undefined : text;
	} catch (err) {
		if (err instanceof Untranslated) return undefined;
		throw err;
	}
}

/**
 * The stored generated column `owner` of every document table: the document's `owner` when it is a string, else SQL
 * null. `{owner: X}` (X a string) holds exactly when this column equals X, or `owner` is an array holding X.
 */
export const ownerColumn = (doc = "doc") => `case jsonb_typeof(${doc}->'owner') when 'string' then ${doc}->>'owner' end`;
export const OWNER_COLUMN = ownerColumn();

/** An `owner` that is an array holding the string of `$x` (the rows the `owner` column cannot answer for). */
const ownerArray = (x: string) => `(jsonb_typeof(doc->'owner') = 'array' and (doc->'owner') @> ${x}::jsonb)`;

/** The conditions of a filter that are ANDed at its top level (`$and` flattened), each a filter of its own. */
function conjuncts(q: Filter): Filter[] {
	const out: Filter[] = [];
	for (const [k, v] of Object.entries(q)) {
		const plain = (x: unknown): x is Filter => !!x && typeof x === "object" && !Array.isArray(x) && !(x instanceof RegExp);
		if (k === "$and" && Array.isArray(v) && v.length && v.every(plain)) out.push(...v.flatMap(conjuncts));
		else out.push({ [k]: v });
	}
	return out;
}

/** X of a condition that is exactly `{owner: X}`, X a string. */
const ownerOf = (c: unknown): string | undefined => {
	const o = c as Filter;
	return o && typeof o === "object" && !Array.isArray(o) && Object.keys(o).length === 1 && typeof o.owner === "string" ? o.owner : undefined;
};

/**
 * A filter of the owner zone split into two disjoint conditions whose union is the filter (both exact SQL):
 *
 * - `owned`: the rows whose `owner` column is X, with every other condition of the filter; the partial b-trees on
 *   (`owner`, sort key) of the live rows serve it in sort order, and count it from the index alone;
 * - `others`: the rest of the zone, `owner` not X: the other zones of an `$or` (shares, groups, clients: the GIN index
 *   of the document) and an `owner` array holding X (the partial index of such rows, usually empty).
 *
 * Only for a filter (already exact, in store form) whose top-level conditions hold `deleted_at: null` (the indexes
 * cover live rows) and either `{owner: X}` or an `$or` with a branch `{owner: X}` (X a string): the caller's zones as
 * the authority layer writes them. Undefined otherwise: the filter is read as one condition.
 */
export function ownerSplit(q: Filter, p: Params): { owned: string; others: string } | undefined {
	const cs = conjuncts(q);
	if (!cs.some((c) => Object.keys(c).length === 1 && "deleted_at" in c && c.deleted_at === null)) return undefined;
	let at = cs.findIndex((c) => ownerOf(c) !== undefined);
	let x: string;
	let alternatives: Filter[] | undefined;
	if (at >= 0) x = ownerOf(cs[at])!;
	else {
		at = cs.findIndex((c) => Object.keys(c).length === 1 && Array.isArray(c.$or) && c.$or.some((e) => ownerOf(e) !== undefined));
		if (at < 0) return undefined;
		const branches = cs[at].$or as Filter[];
		x = branches.map(ownerOf).find((o) => o !== undefined)!;
		alternatives = branches.filter((e) => ownerOf(e) !== x);
	}
	const rest = whereOf({ $and: cs.filter((_c, i) => i !== at) }, p).sql;
	const $x = p.add(x);
	const arr = ownerArray(p.add(JSON.stringify(x)));
	const others = alternatives ? `(owner = ${$x}) is not true and (${[arr, ...alternatives.map((e) => whereOf(e, p).sql)].join(" or ")})` : arr;
	return { owned: `(${rest} and owner = ${$x})`, others: `(${rest} and ${others})` };
}
