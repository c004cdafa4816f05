/**
 * The query language in memory (lib/query.ts): matching, updates and projection, each rule of docs/api.md ("The query
 * language") with its example. No server: the agreement with the SQL translation is test/integration/
 * query-sql.property.test.ts.
 */
import { applyUpdate, compareStrings, equal, matches, project } from "../../lib/query";
import { compileSafe, RegexBudget } from "../../lib/safe-regex";

const re = (src: string, flags = "") => compileSafe("$regex", "q", src, flags, new RegexBudget());
const ids = (docs: Array<Record<string, unknown>>, q: Record<string, unknown>) => docs.filter((d) => matches(d, q)).map((d) => d.id);

describe("matches: paths and arrays", () => {
	const docs = [
		{ id: "scalar", tags: "a", n: 5, lines: { sku: 1 } },
		{ id: "array", tags: ["a", "b"], n: [1, 5], lines: [{ sku: 1 }, {}] },
		{ id: "nested", tags: [["a"]], n: [[5]], lines: [[{ sku: 1 }]] },
		{ id: "none" },
	];

	test("an equality tests the value and, for an array, each element (one level)", () => {
		expect(ids(docs, { tags: "a" })).toEqual(["scalar", "array"]);
		expect(ids(docs, { tags: ["a"] })).toEqual(["nested"]);
		expect(ids(docs, { n: { $gt: 3 } })).toEqual(["scalar", "array"]);
	});

	test("a dotted path steps into the sub-documents of an array, not into an array of arrays; a numeric step takes an element", () => {
		expect(ids(docs, { "lines.sku": 1 })).toEqual(["scalar", "array"]);
		// `nested`'s element 0 is itself an array, whose sub-documents the next step enters.
		expect(ids(docs, { "lines.0.sku": 1 })).toEqual(["array", "nested"]);
		expect(ids([{ id: "o", lines: { "0": { sku: 1 } } }], { "lines.0.sku": 1 })).toEqual(["o"]);
	});

	test("null matches null, missing, an array holding null, and a parent element without the key", () => {
		expect(ids(docs, { tags: null })).toEqual(["none"]);
		expect(
			ids(
				[
					{ id: "x", tags: [null, "a"] },
					{ id: "y", tags: null },
					{ id: "z", tags: "q" },
				],
				{ tags: null },
			),
		).toEqual(["x", "y"]);
		// `array` has `lines: [{sku: 1}, {}]`; `nested`'s path reaches nothing.
		expect(ids(docs, { "lines.sku": null })).toEqual(["array", "nested", "none"]);
		expect(ids(docs, { "lines.sku": { $ne: null } })).toEqual(["scalar"]);
	});

	test("$ne and $nin exclude an array holding the value (the negation of the positive test)", () => {
		expect(ids(docs, { tags: { $ne: "a" } })).toEqual(["nested", "none"]);
		expect(ids(docs, { tags: { $nin: ["b", "z"] } })).toEqual(["scalar", "nested", "none"]);
	});

	test("$exists asks whether the path reaches anything; $size whether a value is an array of that length", () => {
		expect(ids([{ id: "e", tags: [] }, { id: "n", tags: null }, { id: "m" }], { tags: { $exists: true } })).toEqual(["e", "n"]);
		expect(ids(docs, { "lines.sku": { $exists: false } })).toEqual(["nested", "none"]);
		expect(ids(docs, { tags: { $size: 2 } })).toEqual(["array"]);
		expect(ids(docs, { tags: { $size: 1 } })).toEqual(["nested"]);
	});

	test("sub-document equality ignores key order; numbers compare by value", () => {
		expect(matches({ id: "d", p: { a: 1, b: [2, { c: 3 }] } }, { p: { b: [2, { c: 3.0 }], a: 1 } })).toBe(true);
		expect(matches({ id: "d", p: { a: 1, b: [2, 3] } }, { p: { a: 1, b: [3, 2] } })).toBe(false);
		expect(equal({ a: 1 }, { a: 1, b: undefined })).toBe(false);
	});
});

describe("matches: comparisons, patterns, $elemMatch, logic", () => {
	test("comparisons stay within a type; strings by code point; null only for $gte/$lte", () => {
		const docs = [{ id: "n", v: 2 }, { id: "s", v: "2" }, { id: "b", v: true }, { id: "z", v: null }, { id: "m" }];
		expect(ids(docs, { v: { $gte: 2 } })).toEqual(["n"]);
		expect(ids(docs, { v: { $gt: "1" } })).toEqual(["s"]);
		expect(ids(docs, { v: { $gt: false } })).toEqual(["b"]);
		expect(ids(docs, { v: { $gte: null } })).toEqual(["z", "m"]);
		expect(ids(docs, { v: { $gt: null } })).toEqual([]);
		// U+E000 is below an astral character by code point, above its surrogates by UTF-16 unit.
		expect(compareStrings("\ue000", "😀")).toBeLessThan(0);
		expect(matches({ id: "😀" }, { id: { $gt: "\ue000" } })).toBe(true);
	});

	test("$regex (RE2) matches a string or an array's string element; $not negates it", () => {
		const docs = [
			{ id: "s", t: "Alpha" },
			{ id: "a", t: [1, "alpha"] },
			{ id: "n", t: 7 },
		];
		expect(ids(docs, { t: re("^alpha$", "i") })).toEqual(["s", "a"]);
		expect(ids(docs, { t: { $regex: re("^a") } })).toEqual(["a"]);
		expect(ids(docs, { t: { $not: re("^a") } })).toEqual(["s", "n"]);
	});

	test("$elemMatch: a sub-document matching the sub-query, or an element passing every operator itself", () => {
		const docs = [
			{
				id: "objects",
				lines: [
					{ sku: "a", qty: 1 },
					{ sku: "b", qty: 5 },
				],
			},
			{
				id: "split",
				lines: [
					{ sku: "a", qty: 5 },
					{ sku: "b", qty: 1 },
				],
			},
			{ id: "numbers", lines: [1, [4, 9]] },
		];
		expect(ids(docs, { lines: { $elemMatch: { sku: "a", qty: { $gt: 2 } } } })).toEqual(["split"]);
		// One element must pass both: 4 does; 1 and 9 pass one each.
		expect(ids(docs, { lines: { $elemMatch: { $gt: 3, $lt: 5 } } })).toEqual(["numbers"]);
		expect(ids(docs, { lines: { $elemMatch: { $gt: 9 } } })).toEqual([]);
		expect(ids(docs, { lines: { $elemMatch: { $in: ["a"] } } })).toEqual([]);
	});

	test("$and, $or and the query-level $not", () => {
		const docs = [
			{ id: "1", a: 1, b: 2 },
			{ id: "2", a: 1 },
			{ id: "3", b: 2 },
		];
		expect(ids(docs, { $or: [{ a: 1 }, { b: 2 }], $not: { a: 1, b: 2 } })).toEqual(["2", "3"]);
		expect(ids(docs, { $and: [{ a: 1 }, { b: { $exists: false } }] })).toEqual(["2"]);
	});

	test("a platform filter names `id` (at any depth of $and/$or/$not)", () => {
		expect(matches({ id: "x" }, { $or: [{ id: "x" }] })).toBe(true);
		expect(matches({ id: "x" }, { $and: [{ id: "x" }], $not: { id: "z" } })).toBe(true);
		expect(matches({ id: "x" }, { $not: { id: "x" } })).toBe(false);
	});

	test("an operator it does not know answers 400, never a silent match", () => {
		for (const q of [{ $where: "1" }, { a: { $where: "1" } }, { a: { $in: "x" } }, { $or: {} }]) {
			let err: { code?: number; message?: string } | undefined;
			try {
				matches({ id: "d", a: 1 }, q);
			} catch (e) {
				err = e as typeof err;
			}
			expect({ q, code: err?.code, message: err?.message?.startsWith("query is not supported by the document store") }).toEqual({ q, code: 400, message: true });
		}
	});
});

describe("applyUpdate", () => {
	const doc = { id: "d", a: 1, list: ["x", "y"], sub: { n: 1 } };

	test("$set keeps existing keys in place and appends new ones; dotted paths make sub-documents; the input is left as it was", () => {
		const out = applyUpdate(doc, { $set: { list: ["z"], b: 2, "deep.er.k": true, "sub.m": 2 } });
		expect(out).toEqual({ id: "d", a: 1, list: ["z"], sub: { n: 1, m: 2 }, b: 2, deep: { er: { k: true } } });
		expect(Object.keys(out)).toEqual(["id", "a", "list", "sub", "b", "deep"]);
		expect(doc).toEqual({ id: "d", a: 1, list: ["x", "y"], sub: { n: 1 } });
	});

	test("$unset, $inc, $push ($each, $slice), $addToSet, $pull", () => {
		expect(applyUpdate(doc, { $unset: { a: true, "sub.n": true, "no.such": true } })).toEqual({ id: "d", list: ["x", "y"], sub: {} });
		expect(applyUpdate(doc, { $inc: { a: -3, fresh: 2 } })).toMatchObject({ a: -2, fresh: 2 });
		expect(applyUpdate(doc, { $push: { list: "z", ops: "o1" } })).toMatchObject({ list: ["x", "y", "z"], ops: ["o1"] });
		expect(applyUpdate(doc, { $push: { list: { $each: ["z", "w"], $slice: -3 } } }).list).toEqual(["y", "z", "w"]);
		expect(applyUpdate(doc, { $addToSet: { list: { $each: ["x", "q", "q"] } } }).list).toEqual(["x", "y", "q"]);
		expect(applyUpdate(doc, { $pull: { list: "x" } }).list).toEqual(["y"]);
		expect(applyUpdate({ id: "d", l: [{ k: 1 }, { k: 2 }, 3] }, { $pull: { l: { k: 2 } } }).l).toEqual([{ k: 1 }, 3]);
		expect(applyUpdate({ id: "d", l: [1, 5, 9] }, { $pull: { l: { $gte: 5 } } }).l).toEqual([1]);
	});

	test("what an update cannot do answers 400: another id, $inc of a string, $push on a scalar, stored names with $ or .", () => {
		const tries: Array<Record<string, unknown>> = [
			{ $set: { id: "e" } },
			{ $set: { list: "s" }, $inc: { list: 1 } },
			{ $push: { a: 1 } },
			{ $set: { p: { "a.b": 1 } } },
			{ $set: { p: { $gt: 1 } } },
			{ $set: { "__proto__.polluted": 1 } },
			{ $inc: { a: "1" } },
		];
		for (const u of tries) {
			let code: number | undefined;
			try {
				applyUpdate(doc, u);
			} catch (e) {
				code = (e as { code?: number }).code;
			}
			expect({ u, code }).toEqual({ u, code: 400 });
		}
		expect(({} as Record<string, unknown>).polluted).toBeUndefined();
		expect(() => applyUpdate(doc, { $rename: { a: "b" } })).toThrow("unknown update operator $rename");
	});
});

describe("project", () => {
	const doc = { id: "d", title: "t", props: { n: 1, m: 2 }, lines: [{ sku: "a", qty: 1 }, 7, { qty: 2 }] };

	test("inclusion keeps `id` and the paths named (through arrays of sub-documents); exclusion drops them", () => {
		expect(project(doc, { title: 1, "props.n": 1 })).toEqual({ id: "d", title: "t", props: { n: 1 } });
		expect(project(doc, { "lines.qty": 1, id: 0 })).toEqual({ lines: [{ qty: 1 }, { qty: 2 }] });
		expect(project(doc, { props: 0, "lines.qty": 0 })).toEqual({ id: "d", title: "t", lines: [{ sku: "a" }, 7, {}] });
		expect(project(doc, { id: 0 })).toEqual({ title: "t", props: { n: 1, m: 2 }, lines: doc.lines });
		expect(doc.props).toEqual({ n: 1, m: 2 });
	});

	test("mixing inclusion and exclusion answers 400", () => {
		expect(() => project(doc, { title: 1, props: 0 })).toThrow("projection cannot mix inclusion and exclusion");
	});
});
