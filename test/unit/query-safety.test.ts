import { ApiError } from "../../lib/errors";
import { SafeRegExp } from "../../lib/safe-regex";
import { MAX_DEPTH, MAX_IN, MAX_REGEX, parseJsonParam, parsePagination, parsePopulate, parseProjection, parseQuery, parseZones, referencedFields } from "../../lib/query-safety";

/** Asserts `fn` throws the platform's 400 with exactly `message`. */
function rejects(fn: () => unknown, message: string): void {
	let caught: unknown;
	try {
		fn();
	} catch (err) {
		caught = err;
	}
	expect(caught).toBeInstanceOf(ApiError);
	expect((caught as ApiError).code).toBe(400);
	expect((caught as ApiError).type).toBe("Bad Request");
	expect((caught as ApiError).message).toBe(message);
}

/** `{a:{a:...{a:1}}}` with `levels` objects in total. */
function nested(levels: number): Record<string, unknown> {
	let v: unknown = 1;
	for (let i = 0; i < levels; i++) v = { a: v };
	return v as Record<string, unknown>;
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i);

describe("constants", () => {
	it("exposes the documented bounds", () => {
		expect(MAX_DEPTH).toBe(8);
		expect(MAX_IN).toBe(500);
		expect(MAX_REGEX).toBe(256);
	});
});

describe("parseJsonParam", () => {
	it("returns undefined for an absent or empty parameter", () => {
		expect(parseJsonParam("query", undefined)).toBeUndefined();
		expect(parseJsonParam("query", "")).toBeUndefined();
		expect(parseJsonParam("query", "   ")).toBeUndefined();
	});

	it("passes already-parsed plain objects and arrays through", () => {
		const obj = { a: 1 };
		const arr = [1, 2];
		const bare = Object.assign(Object.create(null), { a: 1 });
		expect(parseJsonParam("query", obj)).toBe(obj);
		expect(parseJsonParam("query", arr)).toBe(arr);
		expect(parseJsonParam("query", bare)).toBe(bare);
	});

	it("parses JSON strings", () => {
		expect(parseJsonParam("query", '{"a":[1,"x",null]}')).toEqual({ a: [1, "x", null] });
		expect(parseJsonParam("query", "5")).toBe(5);
		expect(parseJsonParam("query", "null")).toBeNull();
	});

	it.each([["{a:1}"], ["{"], ["undefined"], [5], [true], [null], [new Date()], [/x/], [new Map()]])("rejects %p naming the parameter", (raw) =>
		rejects(() => parseJsonParam("pagination", raw), "pagination must be valid JSON"),
	);
});

describe("parseQuery: shape", () => {
	it("treats an absent query as match-all", () => {
		expect(parseQuery(undefined)).toEqual({});
		expect(parseQuery("")).toEqual({});
		expect(parseQuery("{}")).toEqual({});
	});

	it.each(["[1]", "5", '"x"', "null", "true"])("rejects the non-object %s", (raw) => rejects(() => parseQuery(raw), "query must be a JSON object"));

	it("rejects invalid JSON", () => rejects(() => parseQuery("{'a':1}"), "query must be valid JSON"));

	it("accepts strings and parsed objects alike, plain values kept", () => {
		const q = { name: "x", age: 3, ok: true, gone: null, "a.b_c-d": 1, _id: "z" };
		expect(parseQuery(JSON.stringify(q))).toEqual(q);
		expect(parseQuery(q)).toEqual(q);
	});

	it("accepts null-prototype objects (qs) and returns ordinary fresh objects", () => {
		const inner = Object.assign(Object.create(null), { $gt: 1 });
		const raw = Object.assign(Object.create(null), { a: inner, b: { c: 1 } });
		const out = parseQuery(raw);
		expect(out).toEqual({ a: { $gt: 1 }, b: { c: 1 } });
		expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
		expect(Object.getPrototypeOf(out.a)).toBe(Object.prototype);
		expect(out).not.toBe(raw);
		expect(out.b).not.toBe(raw.b);
		raw.b.c = 2;
		expect(out.b).toEqual({ c: 1 });
	});

	it("accepts every allowed operator", () => {
		const q = {
			a: { $lt: 5, $lte: 5, $gt: 1, $gte: 1, $ne: 3 },
			b: { $in: ["x", 1, true, null], $nin: [2] },
			c: { $exists: true },
			d: { $size: 0 },
			e: { $elemMatch: { x: 1 } },
			f: { $not: { $gt: 5 } },
			$or: [{ g: 1 }, { h: 2 }],
			$and: [{ i: 1 }],
			$not: { j: 1 },
		};
		expect(parseQuery(JSON.stringify(q))).toEqual(q);
		const r = parseQuery({ k: { $regex: "^a", $options: "i" } });
		expect(r.k).toEqual({ $regex: /^a/i });
	});
});

describe("parseQuery: operators", () => {
	it.each(["$where", "$function", "$expr", "$accumulator"])("refuses %s wherever it appears", (op) => {
		const msg = `operator ${op} is not allowed`;
		rejects(() => parseQuery({ [op]: "sleep(1000)" }), msg);
		rejects(() => parseQuery({ a: { [op]: "x" } }), msg);
		rejects(() => parseQuery({ $or: [{ [op]: "x" }] }), msg);
		rejects(() => parseQuery({ a: { $elemMatch: { [op]: "x" } } }), msg);
		rejects(() => parseQuery({ a: { $elemMatch: { b: 1, [op]: "x" } } }), msg);
	});

	it("names unknown operators", () => {
		rejects(() => parseQuery({ $foo: 1 }), "unknown operator $foo");
		rejects(() => parseQuery({ a: { $mod: [2, 0] } }), "unknown operator $mod");
		rejects(() => parseQuery({ a: { $not: { $text: "x" } } }), "unknown operator $text");
		rejects(() => parseQuery({ $nor: [{ a: 1 }] }), "unknown operator $nor");
		rejects(() => parseQuery('{"a":{"$__proto__":1}}'), "unknown operator $__proto__");
	});

	it("places operators where they belong", () => {
		rejects(() => parseQuery({ $gt: 5 }), "operator $gt must be applied to a field");
		rejects(() => parseQuery({ $regex: "x" }), "operator $regex must be applied to a field");
		rejects(() => parseQuery({ a: { $or: [{ b: 1 }] } }), "operator $or must be used at query level");
		rejects(() => parseQuery({ a: { $and: [{ b: 1 }] } }), "operator $and must be used at query level");
		rejects(() => parseQuery({ a: { $gt: 1, b: 2 } }), "a cannot mix operators and fields");
	});

	it.each(["$lt", "$lte", "$gt", "$gte", "$ne", "$eq"])("%s takes a primitive operand", (op) => {
		const msg = `${op} must be a string, number, boolean or null`;
		rejects(() => parseQuery({ a: { [op]: { b: 1 } } }), msg);
		rejects(() => parseQuery({ a: { [op]: [1] } }), msg);
		expect(parseQuery({ a: { [op]: null, $exists: true } })).toBeDefined();
	});

	it.each(["$in", "$nin"])("%s takes an array of at most MAX_IN primitives", (op) => {
		rejects(() => parseQuery({ a: { [op]: "x" } }), `${op} must be an array`);
		rejects(() => parseQuery({ a: { [op]: { 0: "x" } } }), `${op} must be an array`);
		rejects(() => parseQuery({ a: { [op]: range(MAX_IN + 1) } }), `${op} accepts at most 500 values`);
		rejects(() => parseQuery({ a: { [op]: [1, { b: 1 }] } }), `${op} accepts only strings, numbers, booleans and null`);
		rejects(() => parseQuery({ a: { [op]: [[1]] } }), `${op} accepts only strings, numbers, booleans and null`);
		expect(parseQuery({ a: { [op]: range(MAX_IN) } }).a).toEqual({ [op]: range(MAX_IN) });
		expect(parseQuery({ a: { [op]: [] } }).a).toEqual({ [op]: [] });
	});

	it("$exists takes a boolean", () => {
		expect(parseQuery({ a: { $exists: false } })).toEqual({ a: { $exists: false } });
		for (const v of [1, 0, "true", null]) rejects(() => parseQuery({ a: { $exists: v } }), "$exists must be a boolean");
	});

	it("$size takes a non-negative integer", () => {
		expect(parseQuery({ a: { $size: 3 } })).toEqual({ a: { $size: 3 } });
		for (const v of [-1, 1.5, "2", null, [1]]) rejects(() => parseQuery({ a: { $size: v } }), "$size must be a non-negative integer");
	});

	it("$or / $and take a non-empty array of at most 50 objects", () => {
		for (const op of ["$or", "$and"]) {
			const msg = `${op} must be a non-empty array of objects`;
			rejects(() => parseQuery({ [op]: { a: 1 } }), msg);
			rejects(() => parseQuery({ [op]: [] }), msg);
			rejects(() => parseQuery({ [op]: [{ a: 1 }, 2] }), msg);
			rejects(() => parseQuery({ [op]: [[{ a: 1 }]] }), msg);
			rejects(() => parseQuery({ [op]: range(51).map((i) => ({ a: i })) }), `${op} accepts at most 50 entries`);
			expect((parseQuery({ [op]: range(50).map((i) => ({ a: i })) })[op] as unknown[]).length).toBe(50);
		}
		rejects(() => parseQuery({ $or: [{ a: { $where: "x" } }] }), "operator $where is not allowed");
	});

	it("$not takes a sub-query at query level", () => {
		expect(parseQuery({ $not: { a: 1, $or: [{ b: 2 }] } })).toEqual({ $not: { a: 1, $or: [{ b: 2 }] } });
		rejects(() => parseQuery({ $not: "x" }), "$not must be an object");
		rejects(() => parseQuery({ $not: [{ a: 1 }] }), "$not must be an object");
	});

	it("$not takes an operator expression or a regex string under a field", () => {
		expect(parseQuery({ a: { $not: { $in: [1, 2] } } })).toEqual({ a: { $not: { $in: [1, 2] } } });
		const r = parseQuery({ a: { $not: "^x" } }).a as { $not: RegExp };
		expect(r.$not).toBeInstanceOf(RegExp);
		expect(r.$not.source).toBe("^x");
		expect(parseQuery({ a: { $not: { $regex: "y", $options: "m" } } })).toEqual({ a: { $not: { $regex: /y/m } } });
		const msg = "$not must be an object of operators or a regular expression string";
		rejects(() => parseQuery({ a: { $not: 5 } }), msg);
		rejects(() => parseQuery({ a: { $not: { b: 1 } } }), msg);
		rejects(() => parseQuery({ a: { $not: {} } }), msg);
		rejects(() => parseQuery({ a: { $not: ["x"] } }), msg);
		rejects(() => parseQuery({ a: { $not: "(" } }), "$not is not a valid regular expression");
		rejects(() => parseQuery({ a: { $not: "x".repeat(MAX_REGEX + 1) } }), "$not is too long (at most 256 characters)");
		rejects(() => parseQuery({ a: { $not: "(?=a)b" } }), "query.a: $not uses syntax that cannot be matched in linear time");
	});

	it("$elemMatch takes a sub-query or an operator expression", () => {
		expect(parseQuery({ a: { $elemMatch: { b: 1, c: { $gt: 2 } } } })).toEqual({ a: { $elemMatch: { b: 1, c: { $gt: 2 } } } });
		expect(parseQuery({ a: { $elemMatch: { $gte: 2, $lt: 5 } } })).toEqual({ a: { $elemMatch: { $gte: 2, $lt: 5 } } });
		expect(parseQuery({ a: { $elemMatch: { $or: [{ b: 1 }, { c: 2 }] } } })).toEqual({
			a: { $elemMatch: { $or: [{ b: 1 }, { c: 2 }] } },
		});
		for (const v of ["x", 1, [{ b: 1 }], null]) rejects(() => parseQuery({ a: { $elemMatch: v } }), "$elemMatch must be an object");
		rejects(() => parseQuery({ a: { $elemMatch: { b: { $where: "x" } } } }), "operator $where is not allowed");
		rejects(() => parseQuery({ a: { $elemMatch: { "1b": 1 } } }), "invalid field name 1b");
	});
});

describe("parseQuery: $eq", () => {
	it("rewrites a lone $eq to the plain value (one form per meaning)", () => {
		expect(parseQuery({ a: { $eq: 5 } })).toEqual({ a: 5 });
		expect(parseQuery('{"a":{"$eq":null},"b":{"$eq":"x"}}')).toEqual({ a: null, b: "x" });
		expect(parseQuery({ $or: [{ a: { $eq: true } }] })).toEqual({ $or: [{ a: true }] });
	});

	it("turns $eq next to other operators, or nested, into a one-element $in", () => {
		expect(parseQuery({ a: { $eq: 5, $ne: 3 } })).toEqual({ a: { $ne: 3, $in: [5] } });
		expect(parseQuery({ a: { $elemMatch: { $eq: 5 } } })).toEqual({ a: { $elemMatch: { $in: [5] } } });
		expect(parseQuery({ a: { $not: { $eq: 5 } } })).toEqual({ a: { $not: { $in: [5] } } });
		rejects(() => parseQuery({ a: { $eq: 5, $in: [6] } }), "$eq cannot be combined with $in");
	});
});

describe("parseQuery: $regex", () => {
	it("compiles the pattern to a RegExp and folds $options into its flags", () => {
		const out = parseQuery('{"name":{"$regex":"^jo.n$","$options":"ims"}}');
		const re = (out.name as { $regex: RegExp }).$regex;
		expect(re).toBeInstanceOf(RegExp);
		expect(re.source).toBe("^jo.n$");
		expect(re.flags).toBe("ims");
		expect(re.test("JOHN")).toBe(true);
		expect(out.name).not.toHaveProperty("$options");
		expect(Object.keys(out.name as object)).toEqual(["$regex"]);
	});

	it("compiles without flags, dedupes repeated flags and keeps sibling operators", () => {
		expect((parseQuery({ a: { $regex: "x" } }).a as { $regex: RegExp }).$regex.flags).toBe("");
		expect((parseQuery({ a: { $regex: "x", $options: "ii" } }).a as { $regex: RegExp }).$regex.flags).toBe("i");
		expect(parseQuery({ a: { $regex: "x", $ne: "xx" } })).toEqual({ a: { $regex: /x/, $ne: "xx" } });
	});

	it("validates $options", () => {
		for (const o of ["x", "g", "u", "ix", 1, ["i"], null]) rejects(() => parseQuery({ a: { $regex: "x", $options: o } }), "$options may only contain i, m and s");
		rejects(() => parseQuery({ a: { $options: "i" } }), "$options requires $regex");
	});

	it("bounds the pattern length", () => {
		expect(parseQuery({ a: { $regex: "a".repeat(MAX_REGEX) } })).toBeDefined();
		rejects(() => parseQuery({ a: { $regex: "a".repeat(MAX_REGEX + 1) } }), "$regex is too long (at most 256 characters)");
	});

	it("rejects non-strings and patterns that do not compile", () => {
		for (const v of [1, null, { a: 1 }, ["x"]]) rejects(() => parseQuery({ a: { $regex: v } }), "$regex must be a string");
		for (const v of ["(", "[a-", "a{2,1}", "*a", "(?<n>a)(?<n>b)"]) rejects(() => parseQuery({ a: { $regex: v } }), "$regex is not a valid regular expression");
	});

	it.each(["(a+)+", "(a*)*", "(.*)*", "(a+)*", "^(\\w+\\s?)+$", "((a+))+", "(?:a+)+", "(a+?)+", "(a+){2,}", "(a{2,})+", "x(b|c+)+y", "([a-z]+)*", "(.*a){9}$", "^(a|a)+$"])(
		"matches the nested quantifier %s in linear time (RE2), well under a second on a hostile input",
		(src) => {
			const re = (parseQuery({ a: { $regex: src } }).a as { $regex: RegExp }).$regex;
			expect(re).toBeInstanceOf(SafeRegExp);
			const t0 = Date.now();
			// Same answers as JavaScript's engine where that one is fast...
			for (const input of ["aaaa", "aab", "xbcy", "ab cd", ""]) expect(re.test(input)).toBe(new RegExp(src).test(input));
			// ...and no catastrophic backtracking where it is not (JS: a minute for the first).
			for (const input of ["a".repeat(39) + "!", "a".repeat(27) + "!", "a".repeat(5000) + "!"]) re.test(input);
			expect(Date.now() - t0).toBeLessThan(200);
		},
	);

	it.each([
		["(a)\\1", "query.a"],
		["(?=a)a", "query.a"],
		["(?!a)b", "query.a"],
		["(?<=a)b", "query.a"],
		["(?<!a)b", "query.a"],
		["\\k<n>(?<n>a)", "query.a"],
	])("refuses %s, which RE2 cannot match in linear time", (src, where) =>
		rejects(() => parseQuery({ a: { $regex: src } }), `${where}: $regex uses syntax that cannot be matched in linear time`),
	);

	it("names the path of the refused pattern, nested in $or/$elemMatch and in populate.match", () => {
		rejects(() => parseQuery({ $or: [{ b: 1 }, { "c.d": { $regex: "(x)\\1" } }] }), "query.c.d: $regex uses syntax that cannot be matched in linear time");
		rejects(() => parseQuery({ t: { $elemMatch: { u: { $regex: "(?=x)" } } } }), "query.t.u: $regex uses syntax that cannot be matched in linear time");
		rejects(() => parsePopulate({ path: "a", match: { n: { $regex: "(?=x)" } } }), "populate.match.n: $regex uses syntax that cannot be matched in linear time");
	});

	it("refuses programs too large, and a query whose patterns would scan too much text", () => {
		rejects(() => parseQuery({ a: { $regex: "[a-z]{1000}[0-9]{500}" } }), "query.a: $regex is too complex");
		const { $regex: re } = parseQuery({ a: { $regex: "[ab]{200}c" } }).a as { $regex: RegExp };
		const big = "ab".repeat(200_000);
		const t0 = Date.now();
		let caught: unknown;
		try {
			for (let i = 0; i < 10; i++) re.test(big);
		} catch (e) {
			caught = e;
		}
		expect(Date.now() - t0).toBeLessThan(3000);
		expect(caught).toBeInstanceOf(ApiError);
		expect((caught as ApiError).code).toBe(400);
		expect((caught as ApiError).message).toBe("query is too expensive: its $regex patterns would scan too much text; narrow the query");
	});

	it("keeps the JS spellings RE2 lacks: \\u escapes, named groups", () => {
		const t = (src: string, s: string) => (parseQuery({ a: { $regex: src } }).a as { $regex: RegExp }).$regex.test(s);
		expect(t("\\u00e9t\\u00e9", "été")).toBe(true);
		expect(t("(?<y>\\d{4})-", "2024-")).toBe(true);
		expect(t("\\\\u0041", "\\u0041")).toBe(true);
		expect(t("^A", "a")).toBe(false);
	});

	it.each(["(a+)", "(a+)?", "(ab)+", "^a+b+$", "\\d+(\\.\\d+)?", "\\(a+\\)+", "[(a+)]+", "[)]+", "a\\)*", "(a|b)*c", "^[a-z0-9._-]+@[a-z]+$"])(
		"accepts the harmless pattern %s",
		(src) => expect((parseQuery({ a: { $regex: src } }).a as { $regex: RegExp }).$regex.source).toBe(src),
	);
});

describe("parseQuery: field names and prototype pollution", () => {
	afterEach(() => expect(({} as Record<string, unknown>).polluted).toBeUndefined());

	it.each([
		['{"__proto__":{"polluted":1}}', "__proto__"],
		['{"a":{"__proto__":{"polluted":1}}}', "__proto__"],
		['{"a":{"b":{"__proto__":{"polluted":1}}}}', "__proto__"],
		['{"a":[{"__proto__":{"polluted":1}}]}', "__proto__"],
		['{"$or":[{"__proto__":{"polluted":1}}]}', "__proto__"],
		['{"$and":[{"a":1},{"constructor":{"prototype":{"polluted":1}}}]}', "constructor"],
		['{"$not":{"prototype":1}}', "prototype"],
		['{"a":{"$elemMatch":{"__proto__":{"polluted":1}}}}', "__proto__"],
		['{"a":{"$elemMatch":{"$or":[{"constructor":1}]}}}', "constructor"],
		['{"constructor":1}', "constructor"],
		['{"prototype":1}', "prototype"],
		['{"a.__proto__.polluted":1}', "__proto__"],
		['{"__proto__.polluted":1}', "__proto__"],
		['{"a.constructor.prototype":1}', "constructor"],
		['{"a.b.prototype":1}', "prototype"],
	])("rejects %s", (raw, key) => rejects(() => parseQuery(raw), `forbidden key ${key}`));

	it.each(["1a", "a..b", "a b", "a.", ".a", "", "a/b", "a.$b", "é", "a[0]", "-a"])("rejects the field name %p", (name) =>
		rejects(() => parseQuery({ [name]: 1 }), `invalid field name ${name}`),
	);

	it.each(["a", "_id", "A_b-c", "a.b.c", "items.0.qty", "a.-b"])("accepts the field name %p", (name) => expect(parseQuery({ [name]: 1 })).toEqual({ [name]: 1 }));
});

describe("parseQuery: exact values", () => {
	it("accepts sub-documents and arrays, validating their keys", () => {
		const q = { a: { b: 1, c: { d: [1, "x", null, { e: true }] } }, tags: ["x", 2, [3]], empty: {} };
		expect(parseQuery(JSON.stringify(q))).toEqual(q);
	});

	it("refuses operators hidden in sub-documents and arrays", () => {
		rejects(() => parseQuery({ a: { b: { $gt: 1 } } }), "$gt is not allowed in sub-document a.b");
		rejects(() => parseQuery({ a: { b: { c: { $where: "x" } } } }), "$where is not allowed in sub-document a.b.c");
		rejects(() => parseQuery({ tags: [{ $ne: 1 }] }), "$ne is not allowed in sub-document tags");
		rejects(() => parseQuery({ a: { b: { "1x": 1 } } }), "invalid field name 1x");
	});

	it("refuses values JSON cannot carry", () => {
		rejects(() => parseQuery({ a: /x/ }), "a has an unsupported value");
		rejects(() => parseQuery({ a: new Date(0) }), "a has an unsupported value");
		rejects(() => parseQuery({ a: { b: NaN } }), "a.b has an unsupported value");
		rejects(() => parseQuery({ a: [Infinity] }), "a has an unsupported value");
		rejects(() => parseQuery({ a: { $gt: NaN } }), "$gt must be a string, number, boolean or null");
	});
});

describe("parseQuery: depth", () => {
	it(`allows ${MAX_DEPTH} levels and refuses more`, () => {
		expect(parseQuery(nested(MAX_DEPTH))).toEqual(nested(MAX_DEPTH));
		rejects(() => parseQuery(nested(MAX_DEPTH + 1)), "query is too deeply nested (at most 8 levels)");
		rejects(() => parseQuery(JSON.stringify(nested(MAX_DEPTH + 1))), "query is too deeply nested (at most 8 levels)");
	});

	it("counts arrays and operator objects as levels", () => {
		// object, $or array, object, field value object, $elemMatch object, $in array: 6 levels
		expect(parseQuery({ $or: [{ a: { $elemMatch: { b: { $in: [1] } } } }] })).toBeDefined();
		const deep = (arrays: number) => ({ a: JSON.parse("[".repeat(arrays) + "1" + "]".repeat(arrays)) });
		expect(parseQuery(deep(MAX_DEPTH - 1))).toEqual(deep(MAX_DEPTH - 1));
		rejects(() => parseQuery(deep(MAX_DEPTH)), "query is too deeply nested (at most 8 levels)");
		rejects(() => parseQuery({ $or: [{ $and: [{ $or: [{ $and: [{ a: 1 }] }] }] }] }), "query is too deeply nested (at most 8 levels)");
	});

	it("refuses very deep input without exhausting the stack", () => {
		const raw = '{"a":'.repeat(50_000) + "1" + "}".repeat(50_000);
		rejects(() => parseQuery(raw), "query is too deeply nested (at most 8 levels)");
	});
});

describe("referencedFields", () => {
	const fields = (q: unknown) => referencedFields(parseQuery(q)).sort();

	it("lists plain and dotted fields once", () => {
		expect(fields({ a: 1, "b.c": { $gt: 1 }, d: { $regex: "x" } })).toEqual(["a", "b.c", "d"]);
		expect(fields({})).toEqual([]);
		expect(fields({ a: 1, $or: [{ a: 2 }, { a: 3 }] })).toEqual(["a"]);
	});

	it("walks $or, $and and query-level $not at any depth", () => {
		expect(fields({ $or: [{ a: 1 }, { $and: [{ b: 1 }, { $or: [{ c: 1 }] }] }], $not: { d: 1, $or: [{ e: 1 }] } })).toEqual(["a", "b", "c", "d", "e"]);
	});

	it("reports $elemMatch parents, and parent.child for its sub-query form", () => {
		expect(fields({ items: { $elemMatch: { $gt: 1 } } })).toEqual(["items"]);
		expect(fields({ items: { $elemMatch: { qty: { $gt: 1 }, "sku.code": "x" } } })).toEqual(["items", "items.qty", "items.sku.code"]);
		expect(fields({ items: { $elemMatch: { $or: [{ secret: 1 }, { tag: { $elemMatch: { k: 1 } } }] } } })).toEqual(["items", "items.secret", "items.tag", "items.tag.k"]);
		expect(fields({ $or: [{ x: { $not: { $elemMatch: { hidden: 1 } } } }] })).toEqual(["x", "x.hidden"]);
	});

	it("reports the keys of sub-document and array exact matches", () => {
		expect(fields({ a: { b: 1, c: { d: 2 } } })).toEqual(["a", "a.b", "a.c", "a.c.d"]);
		expect(fields({ list: [1, { k: 2 }] })).toEqual(["list", "list.k"]);
		expect(fields({ list: [[{ k: { deep: 1 } }]] })).toEqual(["list", "list.k", "list.k.deep"]);
	});
});

describe("parsePagination", () => {
	it("defaults to the first 10", () => {
		for (const raw of [undefined, "", "{}", {}]) expect(parsePagination(raw)).toEqual({ limit: 10, skip: 0 });
	});

	it("accepts limit, skip and sort", () => {
		expect(parsePagination('{"limit":100,"skip":1000000,"sort":{"a":1,"b":-1,"c":"asc","d":"desc","e.f":"DESC"}}')).toEqual({
			limit: 100,
			skip: 1_000_000,
			sort: { a: 1, b: -1, c: 1, d: -1, "e.f": -1 },
		});
		expect(parsePagination({ limit: "5", skip: "20", sort: { a: "-1" } })).toEqual({ limit: 5, skip: 20, sort: { a: -1 } });
		expect(parsePagination({ limit: 1, sort: {} })).toEqual({ limit: 1, skip: 0 });
	});

	it("rejects malformed input", () => {
		rejects(() => parsePagination("{"), "pagination must be valid JSON");
		rejects(() => parsePagination("[1]"), "pagination must be a JSON object");
		rejects(() => parsePagination({ limit: 5, page: 2 }), "pagination.page is not allowed");
		rejects(() => parsePagination('{"__proto__":{"limit":1}}'), "pagination.__proto__ is not allowed");
	});

	it("bounds limit", () => {
		rejects(() => parsePagination({ limit: 101 }), "pagination.limit must be at most 100");
		rejects(() => parsePagination({ limit: 0 }), "pagination.limit must be at least 1");
		rejects(() => parsePagination({ limit: -3 }), "pagination.limit must be at least 1");
		for (const v of [1.5, "ten", "1e2", null, true, [5]]) rejects(() => parsePagination({ limit: v }), "pagination.limit must be an integer");
	});

	it("bounds skip", () => {
		rejects(() => parsePagination({ skip: -1 }), "pagination.skip must be at least 0");
		rejects(() => parsePagination({ skip: 1_000_001 }), "pagination.skip must be at most 1000000");
		rejects(() => parsePagination({ skip: 0.5 }), "pagination.skip must be an integer");
	});

	it("validates sort", () => {
		rejects(() => parsePagination({ sort: "a" }), "pagination.sort must be a JSON object");
		rejects(() => parsePagination({ sort: [["a", 1]] }), "pagination.sort must be a JSON object");
		rejects(() => parsePagination({ sort: { a: 1, b: 1, c: 1, d: 1, e: 1, f: 1 } }), "pagination.sort accepts at most 5 fields");
		for (const v of [0, 2, "up", null, true]) rejects(() => parsePagination({ sort: { a: v } }), 'pagination.sort.a must be 1, -1, "asc" or "desc"');
		rejects(() => parsePagination({ sort: { "1a": 1 } }), "invalid field name 1a");
		rejects(() => parsePagination({ sort: { $natural: 1 } }), "invalid field name $natural");
		rejects(() => parsePagination('{"sort":{"__proto__":1}}'), "forbidden key __proto__");
		rejects(() => parsePagination({ sort: { "a.constructor": 1 } }), "forbidden key constructor");
	});
});

describe("parseProjection", () => {
	it("is undefined when absent or empty", () => {
		for (const raw of [undefined, "", "{}", {}]) expect(parseProjection(raw)).toBeUndefined();
	});

	it("normalises booleans to 0/1", () => {
		expect(parseProjection('{"a":1,"b.c":true}')).toEqual({ a: 1, "b.c": 1 });
		expect(parseProjection({ a: 0, b: false })).toEqual({ a: 0, b: 0 });
	});

	it("refuses to mix inclusion and exclusion, _id aside", () => {
		rejects(() => parseProjection({ a: 1, b: 0 }), "projection cannot mix inclusion and exclusion");
		rejects(() => parseProjection({ a: false, _id: 1, b: true }), "projection cannot mix inclusion and exclusion");
		expect(parseProjection({ _id: 0, a: 1 })).toEqual({ _id: 0, a: 1 });
		expect(parseProjection({ a: 0, _id: 1 })).toEqual({ a: 0, _id: 1 });
	});

	it("validates values, size and names", () => {
		for (const v of [2, -1, "1", null, { $slice: 1 }]) rejects(() => parseProjection({ a: v }), "projection.a must be 0 or 1");
		const many = (n: number) => Object.fromEntries(range(n).map((i) => [`f${i}`, 1]));
		expect(Object.keys(parseProjection(many(100)) ?? {})).toHaveLength(100);
		rejects(() => parseProjection(many(101)), "projection accepts at most 100 fields");
		rejects(() => parseProjection({ "a b": 1 }), "invalid field name a b");
		rejects(() => parseProjection('{"__proto__":1}'), "forbidden key __proto__");
		rejects(() => parseProjection("[1]"), "projection must be a JSON object");
		rejects(() => parseProjection("nope"), "projection must be valid JSON");
	});
});

describe("parsePopulate", () => {
	it("is empty when absent", () => {
		for (const raw of [undefined, "", "  ", "[]", []]) expect(parsePopulate(raw)).toEqual([]);
	});

	it("accepts a comma-separated list of paths", () => {
		expect(parsePopulate("author")).toEqual([{ path: "author" }]);
		expect(parsePopulate("author, editor ,,owner.org")).toEqual([{ path: "author" }, { path: "editor" }, { path: "owner.org" }]);
	});

	it("accepts a JSON array or object of specs", () => {
		expect(parsePopulate('[{"path":"author","select":["name","email"]},"editor"]')).toEqual([{ path: "author", select: ["name", "email"] }, { path: "editor" }]);
		expect(parsePopulate('{"path":"author","select":"name email,name"}')).toEqual([{ path: "author", select: ["name", "email"] }]);
		expect(parsePopulate({ path: "author", select: "" })).toEqual([{ path: "author" }]);
		expect(parsePopulate([{ path: "a" }, { path: "b", select: "x,y" }])).toEqual([{ path: "a" }, { path: "b", select: ["x", "y"] }]);
	});

	it("validates match as a query", () => {
		const [spec] = parsePopulate('[{"path":"author","match":{"name":{"$regex":"^a","$options":"i"},"age":{"$eq":3}}}]');
		expect(spec.match).toEqual({ name: { $regex: /^a/i }, age: 3 });
		expect(parsePopulate({ path: "a", match: '{"b":1}' })).toEqual([{ path: "a", match: { b: 1 } }]);
		rejects(() => parsePopulate({ path: "a", match: { $where: "1" } }), "operator $where is not allowed");
		rejects(() => parsePopulate({ path: "a", match: [1] }), "populate.match must be a JSON object");
		rejects(() => parsePopulate({ path: "a", match: nested(MAX_DEPTH + 1) }), "populate.match is too deeply nested (at most 8 levels)");
	});

	it("rejects malformed specs", () => {
		rejects(() => parsePopulate("[1,"), "populate must be valid JSON");
		rejects(() => parsePopulate(5), "populate must be valid JSON");
		rejects(() => parsePopulate([5]), "populate entries must be paths or {path, select, match} objects");
		rejects(() => parsePopulate({ select: ["a"] }), "populate.path must be a string");
		rejects(() => parsePopulate({ path: "a", options: {} }), "populate.options is not allowed");
		rejects(() => parsePopulate({ path: "a", select: 5 }), "populate.select must be an array or a space/comma-separated list of field names");
		rejects(() => parsePopulate({ path: "a", select: [1] }), "populate.select must be an array or a space/comma-separated list of field names");
		rejects(() => parsePopulate({ path: "a", select: range(101).map((i) => `f${i}`) }), "populate.select accepts at most 100 fields");
		rejects(() => parsePopulate({ path: "a", select: ["ok", "no way"] }), "invalid field name no way");
		rejects(() => parsePopulate("1a"), "invalid field name 1a");
		rejects(() => parsePopulate("a,$where"), "invalid field name $where");
		rejects(() => parsePopulate("author,__proto__"), "forbidden key __proto__");
		rejects(() => parsePopulate('{"path":"constructor"}'), "forbidden key constructor");
		rejects(() => parsePopulate("a,b,a"), "populate path a is repeated");
	});

	it("accepts at most 10 paths", () => {
		const paths = (n: number) =>
			range(n)
				.map((i) => `p${i}`)
				.join(",");
		expect(parsePopulate(paths(10))).toHaveLength(10);
		rejects(() => parsePopulate(paths(11)), "populate accepts at most 10 paths");
	});
});

describe("parseZones", () => {
	it("defaults to own and share", () => {
		for (const raw of [undefined, "", " , "]) expect(parseZones(raw)).toEqual(["own", "share"]);
		parseZones(undefined).push("client");
		expect(parseZones(undefined)).toEqual(["own", "share"]);
	});

	it("parses, trims and dedupes", () => {
		expect(parseZones("client")).toEqual(["client"]);
		expect(parseZones("group, client,group,own")).toEqual(["group", "client", "own"]);
		expect(parseZones(["own", "share,group"])).toEqual(["own", "share", "group"]);
	});

	it("rejects unknown zones and non-strings", () => {
		rejects(() => parseZones("own,public"), "unknown zone public");
		rejects(() => parseZones("OWN"), "unknown zone OWN");
		rejects(() => parseZones(5), "zones must be a comma-separated string");
		rejects(() => parseZones([1]), "zones must be a comma-separated string");
		rejects(() => parseZones({ own: 1 }), "zones must be a comma-separated string");
	});
});
