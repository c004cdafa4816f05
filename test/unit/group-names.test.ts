/**
 * Issue 23 item 10, `groups` entries are an email or an FQDN (spec: "Email or FQDN list for group access"): one rule
 * (lib/validate.ts `isGroupName`) for every place a group name enters: a document's `groups`, a user's `subjects`, a
 * grant subject's name, the OpenAPI pattern. docs/decisions.md, "Group names", says what an FQDN is here.
 */
import { findCollection } from "../../catalog";
import { openApiDocument } from "../../lib/openapi";
import { userSubjectProblem, validateGrant } from "../../lib/grant-validation";
import { GROUP_PATTERN, GROUP_RULE, isGroupName, validateBody } from "../../lib/validate";
import { ACCEPTED, name253, REFUSED } from "../helpers/group-names";

describe("isGroupName", () => {
	test("the rule as a 400 tells it", () => {
		expect(GROUP_RULE).toBe(
			"a group name: an email (team@example.com) or an FQDN (eng.example.com: two or more dot-separated labels of 1-63 letters, digits or hyphens, no hyphen at a label's ends, 253 characters at most)",
		);
		expect(name253).toHaveLength(253);
	});

	test.each(ACCEPTED)("accepted: %s", (v) => {
		expect(isGroupName(v)).toBe(true);
	});

	test.each(REFUSED)("refused: %j (%s)", (v) => {
		expect(isGroupName(v)).toBe(false);
	});

	test("non-strings and huge or hostile strings are refused quickly", () => {
		for (const v of [42, null, undefined, {}, ["team.example"], true]) expect(isGroupName(v)).toBe(false);
		const start = process.hrtime.bigint();
		for (const v of ["a".repeat(1_000_000), "a.".repeat(500_000) + "b", `${"a-".repeat(150)}!`, `${"a.".repeat(150)}-`, `${"a".repeat(64)}@${"b-".repeat(120)}`])
			expect(isGroupName(v)).toBe(false);
		expect(Number(process.hrtime.bigint() - start) / 1e6).toBeLessThan(200);
	});

	test("the OpenAPI document carries the same rule as the pattern of every `groups` item", () => {
		const doc = openApiDocument() as any;
		const items = doc.components.schemas.ContentNotes.properties.groups.items;
		expect(items).toMatchObject({ type: "string", pattern: GROUP_PATTERN });
		// JSON Schema patterns are ECMA-262 with the `u` flag in most validators: the same answers.
		const re = new RegExp(items.pattern, "u");
		for (const v of ACCEPTED) expect({ v, ok: re.test(v) }).toEqual({ v, ok: true });
		for (const [v] of REFUSED.filter(([x]) => x.length <= 318)) expect({ v, ok: re.test(v) }).toEqual({ v, ok: false });
	});
});

describe("where a group name enters", () => {
	const notes = findCollection("content", "notes")!.collection;
	const users = findCollection("identity", "users")!.collection;

	test("a document's `groups`: create and patch, every collection (common field), the index named", () => {
		expect(validateBody(notes, { title: "t", groups: ACCEPTED }, "create").groups).toEqual(ACCEPTED);
		for (const [v] of REFUSED) {
			expect(() => validateBody(notes, { title: "t", groups: ["team.example", v] }, "create")).toThrow(`groups[1] must be ${GROUP_RULE}`);
			expect(() => validateBody(users, { groups: [v] }, "patch")).toThrow(`groups[0] must be ${GROUP_RULE}`);
		}
		expect(() => validateBody(notes, { title: "t", groups: [7] }, "create")).toThrow("groups[0] must be a string");
		expect(() => validateBody(notes, { title: "t", groups: "team.example" }, "create")).toThrow("groups must be an array");
		expect(() => validateBody(notes, { title: "t", groups: ["team.example"] }, "create", "items[2].")).not.toThrow();
		expect(() => validateBody(notes, { title: "t", groups: ["team-x"] }, "create", "items[2].")).toThrow(`items[2].groups[0] must be ${GROUP_RULE}`);
	});

	test("a user's `subjects`: a role or a group name", () => {
		for (const v of ACCEPTED) expect(userSubjectProblem(v, "subjects[0]")).toBeNull();
		expect(userSubjectProblem("@editor", "subjects[0]")).toBeNull();
		// (`@example.com` is a role: roles keep their own rule.)
		for (const [v] of REFUSED.filter(([x]) => x && !/\s/.test(x) && !x.startsWith("@")))
			expect(userSubjectProblem(v, "subjects[3]")).toBe(`subjects[3]: must be a role (@name) or ${GROUP_RULE}`);
		expect(userSubjectProblem("team x.example", "subjects[0]")).toBe("subjects[0]: must not contain whitespace");
		expect(userSubjectProblem(7, "subjects[0]")).toBe("subjects[0]: must be a non-empty string");
	});

	test("a grant subject's name: a 24-hex id, a username or a group name", () => {
		const grant = (subject: string) => () => validateGrant({ subject, action: "read", object: "content:notes" }, ["acme.example"]);
		for (const v of [...ACCEPTED.filter((x) => x.length < 300), "alice", "team_x", "65f1c0a2b3c4d5e6f7a8b9c0"]) expect(grant(`${v}@acme.example`)).not.toThrow();
		for (const v of ["Alice", "al", "al!ce", "team_x.Example", "tëam.example", "-team.example"])
			expect(grant(`${v}@acme.example`)).toThrow(`subject: invalid name '${v}' before @acme.example: a 24-hex id, a username or ${GROUP_RULE}`);
	});
});
