import { actionSatisfies, hasParsedScope, hasScope, parseScopes, requiredScope, scopeSatisfies } from "../../lib/scopes";

describe("scopes: elevation", () => {
	// [held action, required action, satisfied]
	const table: [string, string, boolean][] = [
		["manage", "manage", true],
		["manage", "write", true],
		["manage", "read", true],
		["write", "manage", false],
		["write", "write", true],
		["write", "read", true],
		["read", "manage", false],
		["read", "write", false],
		["read", "read", true],
	];
	test.each(table)("%s:identity:users satisfies %s:identity:users → %s", (held, required, ok) => {
		expect(scopeSatisfies(`${held}:identity:users`, `${required}:identity:users`)).toBe(ok);
		expect(actionSatisfies(held, required)).toBe(ok);
	});

	test("special actions match only themselves and do not elevate", () => {
		expect(scopeSatisfies("send:touch:emails", "send:touch:emails")).toBe(true);
		expect(scopeSatisfies("manage:touch:emails", "send:touch:emails")).toBe(false);
		expect(scopeSatisfies("send:touch:emails", "read:touch:emails")).toBe(false);
		expect(scopeSatisfies("start:essential:sagas", "abort:essential:sagas")).toBe(false);
		expect(scopeSatisfies("start:essential", "start:essential:sagas")).toBe(true);
	});

	test("whole satisfies everything, only whole satisfies whole", () => {
		expect(scopeSatisfies("whole", "manage:identity:users")).toBe(true);
		expect(scopeSatisfies("whole", "send:touch:smss")).toBe(true);
		expect(scopeSatisfies("whole", "whole")).toBe(true);
		expect(scopeSatisfies("manage:identity", "whole")).toBe(false);
		expect(hasScope("read:content whole", "manage:logistic:vehicles")).toBe(true);
	});
});

describe("scopes: prefix by segment, never across services", () => {
	test("service scope covers its collections", () => {
		expect(scopeSatisfies("read:identity", "read:identity:users")).toBe(true);
		expect(scopeSatisfies("manage:identity", "read:identity:users")).toBe(true);
		expect(scopeSatisfies("read:identity:*", "read:identity:users")).toBe(true);
	});
	test("string prefixes that cut a segment do not match", () => {
		expect(scopeSatisfies("read:iden", "read:identity:users")).toBe(false);
		expect(scopeSatisfies("read:identity:user", "read:identity:users")).toBe(false);
		expect(scopeSatisfies("rea:identity", "read:identity:users")).toBe(false);
	});
	test("a collection scope does not cover the whole service nor another collection", () => {
		expect(scopeSatisfies("read:identity:users", "read:identity")).toBe(false);
		expect(scopeSatisfies("read:identity:users", "read:identity:other")).toBe(false);
	});
	test("another service never matches, even with elevation", () => {
		expect(scopeSatisfies("manage:identity", "read:content:notes")).toBe(false);
		expect(scopeSatisfies("manage:content", "read:content-x:notes")).toBe(false);
		expect(hasScope("manage:identity manage:domain", "read:auth:grants")).toBe(false);
	});
	test("malformed held scopes satisfy nothing", () => {
		expect(scopeSatisfies("read", "read:identity:users")).toBe(false);
		expect(scopeSatisfies("read::users", "read:identity:users")).toBe(false);
		expect(scopeSatisfies("", "read:identity:users")).toBe(false);
		expect(hasScope("", "read:identity")).toBe(false);
	});
});

describe("scopes: token scope strings and the parsed hot path", () => {
	test("space separated, any one suffices", () => {
		const tok = "read:content  write:identity:users\tsend:touch:smss";
		expect(hasScope(tok, "read:content:notes")).toBe(true);
		expect(hasScope(tok, "read:identity:users")).toBe(true);
		expect(hasScope(tok, "write:identity:users")).toBe(true);
		expect(hasScope(tok, "manage:identity:users")).toBe(false);
		expect(hasScope(tok, "write:content:notes")).toBe(false);
		expect(hasScope(tok, "send:touch:smss")).toBe(true);
		expect(hasScope(tok, "send:touch:emails")).toBe(false);
	});
	test("parseScopes once, check many", () => {
		const p = parseScopes("manage:logistic read:identity:users whole-not");
		expect(p.whole).toBe(false);
		expect(hasParsedScope(p, "write:logistic:vehicles")).toBe(true);
		expect(hasParsedScope(p, "read:identity:users")).toBe(true);
		expect(hasParsedScope(p, "read:identity:clients")).toBe(false);
		expect(hasParsedScope(p, "nonsense")).toBe(false);
		expect(parseScopes("whole").whole).toBe(true);
	});
	test("requiredScope", () => {
		expect(requiredScope("read", "identity", "users")).toBe("read:identity:users");
		expect(requiredScope("send", "touch", "")).toBe("send:touch");
		expect(hasScope("read:identity", requiredScope("read", "identity", "users"))).toBe(true);
	});
});
