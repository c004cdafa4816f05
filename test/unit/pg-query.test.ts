/**
 * The translation of the query language into SQL (stores/pg.query.ts), without a database: for each operator,
 * the statement's text and its bind parameters, and whether the SQL is exact or a superset the store matches again in
 * JavaScript. Filters go the way a request's do: parsed and bounded (lib/query-safety.ts), translated (`id` is the
 * row's `id` column), parameters renumbered (bind).
 *
 * What the two engines answer on real rows is test/integration/query-sql.property.test.ts; the refusals of the parser
 * are test/unit/query-safety.test.ts; a projection is applied to the rows in memory (lib/query.ts project,
 * test/unit/query.test.ts), not in SQL.
 */
import { ApiError } from "../../lib/errors";
import { matches } from "../../lib/query";
import { parseQuery } from "../../lib/query-safety";
import { bind, jsonPath, lit, orderOf, ownerSplit, Params, valueAt, whereOf } from "../../stores/pg.query";

/** A raw `query` parameter as the store receives it: the SQL text, its values, and whether it is exact. */
function translate(raw: unknown): { sql: string; values: unknown[]; exact: boolean } {
	return translateStore(parseQuery(raw));
}

/** A filter already in store form, translated (what the store does with what reaches it). */
function translateStore(filter: Record<string, unknown>): { sql: string; values: unknown[]; exact: boolean } {
	const p = new Params();
	const w = whereOf(filter, p);
	const [sql, values] = bind(w.sql, p);
	return { sql, values, exact: w.exact };
}

const json = (v: unknown) => JSON.stringify(v);
/** `{f: v}` at the top level: the field, or an element of it, equals v (the GIN index's containment). */
const CONTAINS = "(doc @> $1::jsonb or doc @> $2::jsonb)";
const contains = (field: string, v: unknown) => [json({ [field]: v }), json({ [field]: [v] })];
/** A comparison of a path: the SQL/JSON path and its variables as parameters. */
const PATH_TEST = "jsonb_path_exists(doc, $1::jsonpath, $2::jsonb)";
const INEXACT = { sql: "true", values: [], exact: false };

describe("equality", () => {
	test("a top-level value is a containment pair: the value, or an array holding it; every value a parameter", () => {
		expect(translate({ title: "a" })).toEqual({ sql: CONTAINS, values: contains("title", "a"), exact: true });
		expect(translate({ n: 5 })).toEqual({ sql: CONTAINS, values: contains("n", 5), exact: true });
		expect(translate({ b: true })).toEqual({ sql: CONTAINS, values: contains("b", true), exact: true });
		// A lone $eq is the plain value.
		expect(translate({ title: { $eq: "a" } })).toEqual(translate({ title: "a" }));
	});

	test("null: missing, JSON null, or an array holding null; no parameter", () => {
		expect(translate({ title: null })).toEqual({
			sql: "(case coalesce(jsonb_typeof((doc->'title')), 'null') when 'null' then true when 'array' then (doc->'title') @> '[null]'::jsonb else false end)",
			values: [],
			exact: true,
		});
	});

	test("id is the row's id column; an id that is not a string matches nothing", () => {
		expect(translate({ id: "0123456789abcdef01234567" })).toEqual({ sql: "(id = $1)", values: ["0123456789abcdef01234567"], exact: true });
		expect(translate({ id: 5 })).toEqual({ sql: "false", values: [], exact: true });
	});

	test("an array or a sub-document: jsonb equality of the value, or of an element of an array field", () => {
		const shape = (f: string) =>
			`coalesce((doc->'${f}') = $1::jsonb or (jsonb_typeof((doc->'${f}')) = 'array' and exists (select 1 from jsonb_array_elements((doc->'${f}')) e where e = $1::jsonb)), false)`;
		expect(translate({ tags: ["a", "b"] })).toEqual({ sql: shape("tags"), values: [json(["a", "b"])], exact: true });
		expect(translate({ p: { k: 1 } })).toEqual({ sql: shape("p"), values: [json({ k: 1 })], exact: true });
	});
});

describe("comparisons", () => {
	test("$gt, $gte, $lt, $lte: a lax SQL/JSON path over the field, the bound a path variable", () => {
		expect(translate({ n: { $gt: 1 } })).toEqual({ sql: PATH_TEST, values: ['$."n" ? (@.type() != "array" && @ > $v)', json({ v: 1 })], exact: true });
		expect(translate({ title: { $lte: "m" } })).toEqual({ sql: PATH_TEST, values: ['$."title" ? (@.type() != "array" && @ <= $v)', json({ v: "m" })], exact: true });
		expect(translate({ n: { $gte: 1, $lt: 9 } })).toEqual({
			sql: "(jsonb_path_exists(doc, $1::jsonpath, $2::jsonb) and jsonb_path_exists(doc, $3::jsonpath, $4::jsonb))",
			values: ['$."n" ? (@.type() != "array" && @ >= $v)', json({ v: 1 }), '$."n" ? (@.type() != "array" && @ < $v)', json({ v: 9 })],
			exact: true,
		});
	});

	test("a comparison with a boolean or null is left to JavaScript (the SQL selects a superset)", () => {
		expect(translate({ n: { $gt: true } })).toEqual(INEXACT);
		expect(translate({ n: { $gte: null } })).toEqual(INEXACT);
	});

	test("on id: the column, compared as text; a number matches nothing", () => {
		expect(translate({ id: { $gt: "0123" } })).toEqual({ sql: "(id > $1)", values: ["0123"], exact: true });
		expect(translate({ id: { $lte: 5 } })).toEqual({ sql: "false", values: [], exact: true });
	});

	test("$ne is the negation of the equality", () => {
		expect(translate({ title: { $ne: "a" } })).toEqual({ sql: `(not ${CONTAINS})`, values: contains("title", "a"), exact: true });
		expect(translate({ title: { $ne: null } }).sql).toBe(
			"(not (case coalesce(jsonb_typeof((doc->'title')), 'null') when 'null' then true when 'array' then (doc->'title') @> '[null]'::jsonb else false end))",
		);
	});
});

describe("$in, $nin, $exists, $size", () => {
	test("$in: an OR of equalities; empty matches nothing; on id one array parameter", () => {
		expect(translate({ title: { $in: ["a", "b"] } })).toEqual({
			sql: "((doc @> $1::jsonb or doc @> $2::jsonb) or (doc @> $3::jsonb or doc @> $4::jsonb))",
			values: [...contains("title", "a"), ...contains("title", "b")],
			exact: true,
		});
		expect(translate({ title: { $in: [] } })).toEqual({ sql: "false", values: [], exact: true });
		expect(translate({ id: { $in: ["x", "y"] } })).toEqual({ sql: "(id = any($1::text[]))", values: [["x", "y"]], exact: true });
		// $eq beside another operator becomes a one-value $in.
		expect(translate({ n: { $eq: 2, $gt: 1 } }).sql).toBe("(jsonb_path_exists(doc, $1::jsonpath, $2::jsonb) and ((doc @> $3::jsonb or doc @> $4::jsonb)))");
	});

	test("$nin: the negation of $in; empty matches everything", () => {
		expect(translate({ title: { $nin: ["a"] } })).toEqual({ sql: `(not (${CONTAINS}))`, values: contains("title", "a"), exact: true });
		expect(translate({ title: { $nin: [] } })).toEqual({ sql: "true", values: [], exact: true });
	});

	test("$exists: the key operator at the top, a path on a dotted field, always or never on id", () => {
		expect(translate({ title: { $exists: true } })).toEqual({ sql: "(doc ? 'title')", values: [], exact: true });
		expect(translate({ title: { $exists: false } })).toEqual({ sql: "(not (doc ? 'title'))", values: [], exact: true });
		expect(translate({ "a.b": { $exists: false } })).toEqual({ sql: "(not jsonb_path_exists(doc, $1::jsonpath))", values: ['$."a"."b"'], exact: true });
		expect(translate({ id: { $exists: true } })).toEqual({ sql: "true", values: [], exact: true });
		expect(translate({ id: { $exists: false } })).toEqual({ sql: "false", values: [], exact: true });
	});

	test("$size: an array of that length, the length a parameter; on a dotted path left to JavaScript", () => {
		expect(translate({ tags: { $size: 2 } })).toEqual({
			sql: "coalesce(jsonb_typeof((doc->'tags')) = 'array' and jsonb_array_length((doc->'tags')) = $1::int, false)",
			values: [2],
			exact: true,
		});
		expect(translate({ "a.tags": { $size: 2 } })).toEqual(INEXACT);
	});
});

describe("$regex", () => {
	const MATCHES = (f: string) =>
		`coalesce(case jsonb_typeof((doc->'${f}')) when 'string' then ((doc->'${f}') #>> '{}') ~ $1 when 'array' then exists (select 1 from jsonb_array_elements((doc->'${f}')) e where jsonb_typeof(e) = 'string' and (e #>> '{}') ~ $1) else false end, false)`;

	test("a pattern of the shared subset is PostgreSQL's ~, the translated pattern a parameter", () => {
		expect(translate({ title: { $regex: "^ab" } })).toEqual({ sql: MATCHES("title"), values: ["^ab"], exact: true });
		// `i` spells out each letter's case folding; `.` excludes the newline as in RE2.
		expect(translate({ title: { $regex: "^a.", $options: "i" } })).toEqual({ sql: MATCHES("title"), values: ["^[\\u0061\\u0041][^\\u000a]"], exact: true });
		expect(translate({ id: { $regex: "^01" } })).toEqual({ sql: "(id ~ $1)", values: ["^01"], exact: true });
	});

	test("outside the subset, or on a dotted path: matched in JavaScript by RE2", () => {
		expect(translate({ title: { $regex: "\\bx" } })).toEqual(INEXACT);
		expect(translate({ "a.b": { $regex: "x" } })).toEqual(INEXACT);
	});

	test("a pattern's characters reach PostgreSQL as escapes, never as its own syntax", () => {
		const t = translate({ title: { $regex: "'; drop table x; --" } });
		expect(t.sql).toBe(MATCHES("title"));
		expect(t.values).toEqual(["\\u0027\\u003b\\u0020drop\\u0020table\\u0020x\\u003b\\u0020\\u002d\\u002d"]);
	});
});

describe("logic: $and, $or, $not, and exactness", () => {
	test("$and and $or join their branches; $not negates a sub-query, or a field's operators, or a pattern", () => {
		const two = "(doc @> $1::jsonb or doc @> $2::jsonb) %s (doc @> $3::jsonb or doc @> $4::jsonb)";
		expect(translate({ $and: [{ a: 1 }, { b: 2 }] })).toEqual({ sql: `(${two.replace("%s", "and")})`, values: [...contains("a", 1), ...contains("b", 2)], exact: true });
		expect(translate({ $or: [{ a: 1 }, { b: 2 }] })).toEqual({ sql: `(${two.replace("%s", "or")})`, values: [...contains("a", 1), ...contains("b", 2)], exact: true });
		expect(translate({ $not: { a: 1 } })).toEqual({ sql: `(not ${CONTAINS})`, values: contains("a", 1), exact: true });
		expect(translate({ a: { $not: { $gt: 1 } } })).toEqual({ sql: `(not ${PATH_TEST})`, values: ['$."a" ? (@.type() != "array" && @ > $v)', json({ v: 1 })], exact: true });
		expect(translate({ a: { $not: "^x" } }).values).toEqual(["^x"]);
		// Two conditions of one filter are ANDed.
		expect(translate({ a: 1, b: 2 })).toEqual(translate({ $and: [{ a: 1 }, { b: 2 }] }));
	});

	test("an inexact branch makes $or inexact; the negation of a superset is no superset, so $not of one is TRUE", () => {
		const or = translate({ $or: [{ a: 1 }, { b: { $regex: "\\bx" } }] });
		expect(or).toEqual({ sql: "((doc @> $1::jsonb or doc @> $2::jsonb) or true)", values: contains("a", 1), exact: false });
		// The parameters of the dropped branch are dropped too: PostgreSQL refuses a value no placeholder names.
		expect(translate({ $not: { $and: [{ a: 1 }, { b: { $regex: "\\bx" } }] } })).toEqual(INEXACT);
		expect(translate({ a: { $not: { $gt: true } } })).toEqual(INEXACT);
	});

	test("bind renumbers the parameters a statement keeps, in order", () => {
		const p = new Params();
		const w = whereOf({ $and: [{ $not: { $and: [{ a: 1 }, { b: { $gt: true } }] } }, { c: "x" }] }, p);
		expect(p.values).toHaveLength(4);
		expect(bind(w.sql, p)).toEqual(["(true and (doc @> $1::jsonb or doc @> $2::jsonb))", contains("c", "x")]);
	});
});

describe("dotted paths and arrays", () => {
	test("a dotted equality is a path with the value a variable; a string segment is a quoted key", () => {
		expect(translate({ "a.b": 1 })).toEqual({ sql: PATH_TEST, values: ['$."a"."b" ? (@.type() != "array" && @ == $v)', json({ v: 1 })], exact: true });
	});

	test("a numeric second segment takes the array's element or the sub-document's key (the group zone's clients.0)", () => {
		const base = "(case jsonb_typeof((doc->'clients')) when 'array' then (doc->'clients')->0 when 'object' then (doc->'clients')->'0' end)";
		expect(translate({ "clients.0": "c" })).toEqual({
			sql: `coalesce(jsonb_path_exists(${base}, $1::jsonpath, $2::jsonb), false)`,
			values: ['$ ? (@.type() != "array" && @ == $v)', json({ v: "c" })],
			exact: true,
		});
		expect(translate({ "lines.1.sku": 1 }).values).toEqual(['$."sku" ? (@.type() != "array" && @ == $v)', json({ v: 1 })]);
		// A numeric segment deeper in the path: JavaScript.
		expect(translate({ "a.b.0": 1 })).toEqual(INEXACT);
	});

	test("null on a dotted path: missing, null, or missing in one of an array's sub-documents", () => {
		expect(translate({ "a.b": null })).toEqual({
			sql: "(not jsonb_path_exists(doc, $1::jsonpath) or jsonb_path_exists(doc, $2::jsonpath) or jsonb_path_exists(doc, $3::jsonpath))",
			values: ['$."a"."b"', '$."a"."b" ? (@.type() != "array" && @ == null)', '$."a" ? (@.type() != "object" || !exists(@."b"))'],
			exact: true,
		});
	});

	test("a sub-document or array value on a dotted path is left to JavaScript", () => {
		expect(translate({ "a.b": { c: 1 } })).toEqual(INEXACT);
		expect(translate({ "a.b": [1] })).toEqual(INEXACT);
	});

	test("$elemMatch: element tests in one path, a sub-query over the object elements", () => {
		expect(translate({ tags: { $elemMatch: { $gt: 1, $lt: 5 } } })).toEqual({
			sql: "coalesce(jsonb_typeof((doc->'tags')) = 'array' and jsonb_path_exists((doc->'tags'), $1::jsonpath, $2::jsonb), false)",
			values: ['$[*] ? (@.type() != "array" && @ > $v0 && @ < $v1)', json({ v0: 1, v1: 5 })],
			exact: true,
		});
		expect(translate({ lines: { $elemMatch: { sku: 1 } } })).toEqual({
			sql: "coalesce(jsonb_typeof((doc->'lines')) = 'array' and exists (select 1 from jsonb_array_elements((doc->'lines')) el where jsonb_typeof(el) = 'object' and (el @> $1::jsonb or el @> $2::jsonb)), false)",
			values: contains("sku", 1),
			exact: true,
		});
		// A negative test inside is a superset in SQL, decided in JavaScript.
		expect(translate({ lines: { $elemMatch: { sku: { $ne: 1 } } } }).exact).toBe(false);
		expect(translate({ "a.lines": { $elemMatch: { sku: 1 } } })).toEqual(INEXACT);
	});
});

describe("sort", () => {
	test("jsonb order per field, missing first ascending; then id in the first key's direction", () => {
		expect(orderOf(undefined)).toBe("id asc");
		expect(orderOf({ title: -1 })).toBe("(doc->'title') desc nulls last, id desc");
		expect(orderOf({ "a.b": 1, id: -1 })).toBe(`(doc#>'{"a","b"}'::text[]) asc nulls first, id desc`);
		expect(orderOf({ id: -1 })).toBe("id desc");
	});
});

describe("the owner zone split (the engine's zones own and share)", () => {
	test("owned rows through the owner column, the rest through the other zones; the identity a parameter", () => {
		const p = new Params();
		const split = ownerSplit({ deleted_at: null, $or: [{ owner: "u1" }, { shares: "u1" }] }, p)!;
		const live = "(case coalesce(jsonb_typeof((doc->'deleted_at')), 'null') when 'null' then true when 'array' then (doc->'deleted_at') @> '[null]'::jsonb else false end)";
		expect(split.owned).toBe(`(${live} and owner = $1)`);
		expect(split.others).toBe(
			`(${live} and (owner = $1) is not true and ((jsonb_typeof(doc->'owner') = 'array' and (doc->'owner') @> $2::jsonb) or (doc @> $3::jsonb or doc @> $4::jsonb)))`,
		);
		expect(p.values).toEqual(["u1", json("u1"), ...contains("shares", "u1")]);
		// Without the live-row condition the indexes do not cover the filter: no split.
		expect(ownerSplit({ $or: [{ owner: "u1" }, { shares: "u1" }] }, new Params())).toBeUndefined();
	});
});

describe("hostile names and values", () => {
	test.each([
		["a'b", "invalid field name a'b"],
		['a"b', 'invalid field name a"b'],
		["a;b", "invalid field name a;b"],
		["a --", "invalid field name a --"],
		["a\u0000b", "invalid field name a\u0000b"],
		["ü", "invalid field name ü"],
		["a.b'); drop table notes; --", "invalid field name a.b'); drop table notes; --"],
	])("a field named %j is refused before any SQL, with a 400 naming it", (name, message) => {
		for (const raw of [{ [name]: 1 }, { $or: [{ [name]: { $gt: 1 } }] }, { a: { $elemMatch: { [name]: 1 } } }]) {
			let caught: unknown;
			try {
				translate(raw);
			} catch (err) {
				caught = err;
			}
			expect(caught).toBeInstanceOf(ApiError);
			expect({ code: (caught as ApiError).code, message: (caught as ApiError).message }).toEqual({ code: 400, message });
		}
	});

	test("a value is a parameter whatever it holds: quotes, `;`, `--`, operator and prototype names, unicode", () => {
		for (const v of ["'; drop table notes; --", 'a"b\\', "$where", "__proto__", "☃ é \u{1F600}", "a\u0000b"]) {
			expect(translate({ title: v })).toEqual({ sql: CONTAINS, values: contains("title", v), exact: true });
			expect(translate({ "a.b": { $gt: v } })).toEqual({ sql: PATH_TEST, values: ['$."a"."b" ? (@.type() != "array" && @ > $v)', json({ v })], exact: true });
			expect(translate({ id: { $in: [v] } })).toEqual({ sql: "(id = any($1::text[]))", values: [[v]], exact: true });
		}
	});

	test("a name reaching the store unvalidated is still written escaped: a literal doubles its quote, a path key escapes its quote", () => {
		expect(lit("a'b")).toBe("'a''b'");
		expect(() => lit("a\u0000b")).toThrow("field names cannot contain NUL");
		expect(jsonPath('a"b.0.c\\d')).toBe('$."a\\"b"[0]."c\\\\d"');
		expect(valueAt("x'); drop table t; --")).toBe("(doc->'x''); drop table t; --')");
		expect(valueAt('a.b"c')).toBe(`(doc#>'{"a","b\\"c"}'::text[])`);
		expect(translateStore({ "a'b": { $exists: true } })).toEqual({ sql: "(doc ? 'a''b')", values: [], exact: true });
		// At the top level, and on a path, the name travels inside a parameter.
		expect(translateStore({ "x'); drop table t; --": 1 })).toEqual({ sql: CONTAINS, values: contains("x'); drop table t; --", 1), exact: true });
		expect(translateStore({ 'a"b.c': { $gt: 1 } }).values[0]).toBe('$."a\\"b"."c" ? (@.type() != "array" && @ > $v)');
	});

	test("an operator the store does not know is no SQL: the SQL selects a superset and the matcher refuses it (400)", () => {
		expect(translateStore({ $where: "sleep(10)" })).toEqual(INEXACT);
		expect(translateStore({ a: { $where: "1" } })).toEqual(INEXACT);
		expect(() => matches({ id: "x" }, { $where: "1" })).toThrow("query is not supported by the document store: unknown operator $where");
	});
});
