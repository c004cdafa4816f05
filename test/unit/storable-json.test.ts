/**
 * Text PostgreSQL can store (runtime/relational.ts): NUL removed, lone UTF-16 surrogates replaced by U+FFFD, in every
 * string and key of a JSON value; a value with nothing to change comes back as the same object (no copy per request).
 */
import { storableJson, storableText } from "../../runtime/relational";

describe("storable text and JSON", () => {
	test("NUL goes, lone surrogates become U+FFFD, pairs and plain text stay", () => {
		expect(storableText("a\u0000b")).toBe("ab");
		expect(storableText("x\uD800y")).toBe("x\uFFFDy");
		expect(storableText("x\uDC00")).toBe("x\uFFFD");
		expect(storableText("emoji \uD83D\uDE00 ok")).toBe("emoji \uD83D\uDE00 ok");
		expect(storableText("plain é ✓")).toBe("plain é ✓");
	});

	test("a clean value is returned as it is, nested objects and arrays included", () => {
		const v = { a: "x", n: 1, list: [{ b: "y", when: new Date(0) }, "z", null], deep: { e: true } };
		expect(storableJson(v)).toBe(v);
		expect(storableJson(v.list)).toBe(v.list);
	});

	test("a value with something to clean is copied; the input is not changed", () => {
		const clean = { keep: "same" };
		const v = { ["k\u0000ey"]: "v\uD800", list: ["ok", "a\u0000"], clean, n: 2 };
		const out = storableJson(v) as Record<string, unknown>;
		expect(out).toEqual({ key: "v\uFFFD", list: ["ok", "a"], clean: { keep: "same" }, n: 2 });
		expect(Object.keys(out)).toEqual(["key", "list", "clean", "n"]);
		expect(out.clean).not.toBe(clean);
		expect(v.list).toEqual(["ok", "a\u0000"]);
		expect(Object.keys(v)[0]).toBe("k\u0000ey");
	});

	test("a key named __proto__ stays a plain own key", () => {
		const v = JSON.parse('{"__proto__": {"polluted": "a\\u0000"}}');
		const out = storableJson(v) as Record<string, unknown>;
		expect(Object.getPrototypeOf(out)).toBe(Object.prototype);
		expect(Object.prototype.hasOwnProperty.call(out, "__proto__")).toBe(true);
		expect(({} as Record<string, unknown>).polluted).toBeUndefined();
	});
});
