/**
 * Issue 23 item 10, `groups` entries are an email or an FQDN (spec: common field `groups`, "Email or FQDN list for group
 * access"; grant subject `group-name`), on both document stores, two tenants: every place a group name enters the
 * platform through the API takes the one rule of lib/validate.ts (`isGroupName`) and answers 400 naming the entry and
 * the rule; what it accepts is stored as written and reaches tokens and the group zone.
 */
import { COLLECTIONS } from "../../catalog";
import { GROUP_RULE } from "../../lib/validate";
import { errorBody, payloadOf } from "../helpers/auth";
import { sampleBody } from "../helpers/samples";
import { bootTenancy, ok, type Tenancy, type Tenant } from "../helpers/tenants";
import { ACCEPTED, REFUSED } from "../helpers/group-names";

jest.setTimeout(120_000);

const NOT_GROUP = (field: string) => errorBody(400, `${field} must be ${GROUP_RULE}`);
const NOT_SUBJECT = (field: string) => errorBody(400, `${field}: must be a role (@name) or ${GROUP_RULE}`);
const qs = (params: Record<string, unknown>) =>
	`?${new URLSearchParams(Object.entries(params).map(([k, v]): [string, string] => [k, typeof v === "string" ? v : JSON.stringify(v)]))}`;

describe("group names", () => {
	let t: Tenancy;
	beforeAll(async () => {
		t = await bootTenancy();
	}, 180_000);
	afterAll(() => t?.cleanup());
	const both = (): Tenant[] => [t.a, t.b];
	const count = async (token: string) => (await ok(t.as(token, "GET", "/content/notes/count?zone=own"), "count")).total as number;

	test("accepted forms are stored as written: create, patch, bulk create, bulk patch; users' groups too", async () => {
		for (const x of both()) {
			const note = (await ok(t.as(x.admin.token, "POST", "/content/notes", { title: "grouped", groups: ACCEPTED }), `${x.name} create`)).data;
			expect(note.groups).toEqual(ACCEPTED);
			const reversed = [...ACCEPTED].reverse();
			expect((await ok(t.as(x.admin.token, "PATCH", `/content/notes/${note.id}`, { groups: reversed }), "patch")).data.groups).toEqual(reversed);
			const bulk = await ok(
				t.as(x.admin.token, "POST", "/content/notes/bulk", {
					items: [
						{ title: "b1", groups: ["team@a.example"] },
						{ title: "b2", groups: ["eng.b.example"] },
					],
				}),
				"bulk",
			);
			expect(bulk.items.map((d: { groups: string[] }) => d.groups)).toEqual([["team@a.example"], ["eng.b.example"]]);
			const query = { title: { $in: ["b1", "b2"] } };
			await ok(t.as(x.admin.token, "PATCH", `/content/notes/bulk${qs({ query })}`, { groups: ["ops.example.org"] }), "bulk patch");
			const listed = (await ok(t.as(x.admin.token, "GET", `/content/notes${qs({ query })}`), "list")).items;
			expect(listed.map((d: { groups: string[] }) => d.groups)).toEqual([["ops.example.org"], ["ops.example.org"]]);
			const user = (
				await ok(t.as(x.admin.token, "POST", "/identity/users", { username: `grouped-${x.name}`, password: "Grouped-pw-1", groups: ["team@a.example", "eng.example.com"] }), "user")
			).data;
			expect(user.groups).toEqual(["team@a.example", "eng.example.com"]);
		}
	});

	test("refused forms answer 400 naming the entry and the rule, and write nothing: create, patch, bulk create, bulk patch", async () => {
		for (const x of both()) {
			const note = (await ok(t.as(x.admin.token, "POST", "/content/notes", { title: "target", groups: ["team.example"] }), "target")).data;
			const before = await count(x.admin.token);
			for (const [v, why] of REFUSED) {
				const answers = {
					create: (await t.as(x.admin.token, "POST", "/content/notes", { title: "no", groups: ["team.example", v] })).body,
					patch: (await t.as(x.admin.token, "PATCH", `/content/notes/${note.id}`, { groups: [v] })).body,
					bulk: (await t.as(x.admin.token, "POST", "/content/notes/bulk", { items: [{ title: "no" }, { title: "no", groups: [v] }] })).body,
					bulkPatch: (await t.as(x.admin.token, "PATCH", `/content/notes/bulk${qs({ query: { title: "target" } })}`, { groups: [v, "team.example"] })).body,
					user: (await t.as(x.admin.token, "POST", "/identity/users", { username: "refused", password: "Refused-pw-1", groups: [v] })).body,
				};
				expect({ v, why, answers }).toEqual({
					v,
					why,
					answers: {
						create: NOT_GROUP("groups[1]"),
						patch: NOT_GROUP("groups[0]"),
						bulk: NOT_GROUP("items[1].groups[0]"),
						bulkPatch: NOT_GROUP("groups[0]"),
						user: NOT_GROUP("groups[0]"),
					},
				});
			}
			for (const v of [42, null, {}, ["team.example"], true])
				expect((await t.as(x.admin.token, "POST", "/content/notes", { title: "no", groups: [v] })).body).toEqual(errorBody(400, "groups[0] must be a string"));
			expect((await t.as(x.admin.token, "POST", "/content/notes", { title: "no", groups: "team.example" })).body).toEqual(errorBody(400, "groups must be an array"));
			expect(await count(x.admin.token)).toBe(before);
			expect((await ok(t.as(x.admin.token, "GET", `/content/notes/${note.id}`), "target")).data.groups).toEqual(["team.example"]);
		}
	});

	test("every collection a caller writes takes the rule on `groups` (the common field)", async () => {
		const answers: Record<string, unknown> = {};
		// special/stats and touch/push-histories are written by the platform only (405 to any body).
		const written = COLLECTIONS.filter((c) => !c.collection.platformWritten);
		expect(written.length).toBeGreaterThan(40);
		for (const c of written) {
			const body = { ...sampleBody(c, 0, { domain: t.a.domain }), groups: ["team-x"] };
			answers[c.path] = (await t.as(t.a.admin.token, "POST", `/${c.path}`, body)).body;
		}
		const expected = Object.fromEntries(written.map((c) => [c.path, NOT_GROUP("groups[0]")]));
		expect(answers).toEqual(expected);
	});

	test("a user's subjects: group names in either form are accepted and reach the token; others answer 400", async () => {
		for (const x of both()) {
			const groups = [`team@${x.domain}`, `eng.${x.domain}`];
			const password = "Subjects-pw-1";
			const u = (await ok(t.as(x.admin.token, "POST", "/identity/users", { username: "subjected", password, subjects: ["@editor", ...groups] }), "user")).data;
			const claims = payloadOf(await t.login(x, "subjected", password));
			expect(claims.groups).toEqual(groups);
			expect(claims.subject.split(" ")).toEqual(expect.arrayContaining(groups.map((g) => `${g}@${x.domain}`)));
			for (const [v] of REFUSED.filter(([s]) => s && !/\s/.test(s) && !s.startsWith("@"))) {
				expect((await t.as(x.admin.token, "POST", "/identity/users", { username: "refused", password, subjects: ["@editor", v] })).body).toEqual(NOT_SUBJECT("subjects[1]"));
				expect((await t.as(x.admin.token, "PATCH", `/identity/users/${u.id}`, { subjects: [v] })).body).toEqual(NOT_SUBJECT("subjects[0]"));
			}
			expect((await t.as(x.admin.token, "PATCH", `/identity/users/${u.id}`, { subjects: ["team x.example"] })).body).toEqual(
				errorBody(400, "subjects[0]: must not contain whitespace"),
			);
			expect((await t.as(x.admin.token, "PATCH", `/identity/users/${u.id}`, { subjects: [7] })).body).toEqual(errorBody(400, "subjects[0] must be a string"));
			// Nothing changed: the user's groups are still those it was created with.
			expect((await ok(t.as(x.admin.token, "GET", `/identity/users/${u.id}`), "user")).data.subjects).toEqual(["@editor", ...groups]);
		}
	});

	test("a group name stored before the rule reaches no token; the group zone stays in its tenant", async () => {
		const users = (t.p.broker.getLocalService("identity") as any).collectionStore("users");
		const password = "Legacy-pw-1";
		const legacy = (await ok(t.as(t.a.admin.token, "POST", "/identity/users", { username: "legacy", password, subjects: ["@editor"] }), "legacy")).data;
		await users.setMany([legacy.id], { subjects: ["@editor", "team-x", "team-x.example"] });
		const claims = payloadOf(await t.login(t.a, "legacy", password));
		expect(claims.groups).toEqual(["team-x.example"]);
		expect(claims.subject.split(" ")).not.toContain(`team-x@${t.a.domain}`);
		expect(claims.subject.split(" ")).toContain(`team-x.example@${t.a.domain}`);
		// A's note of group team-x.example: A's member (and the legacy user) see it in the group zone; B's member, in a
		// group of the same name, does not.
		const note = (await ok(t.as(t.a.admin.token, "POST", "/content/notes", { title: "for the team", groups: ["team-x.example"] }), "note")).data;
		const inGroup = async (token: string) =>
			(await ok(t.as(token, "GET", `/content/notes${qs({ zone: "group", query: { title: "for the team" } })}`), "list")).items.map((d: { id: string }) => d.id);
		expect(await inGroup(t.a.member.token)).toEqual([note.id]);
		expect(await inGroup(await t.login(t.a, "legacy", password))).toEqual([note.id]);
		expect(await inGroup(t.b.member.token)).toEqual([]);
	});

	test("grant subjects naming a group: a valid name in the caller's own domain", async () => {
		for (const x of both()) {
			for (const g of [`team@${x.domain}`, `eng.${x.domain}`, "team-x.example"])
				await t.grant(x.admin.token, { subject: `${g}@${x.domain}`, action: "read", object: "content:posts" });
			for (const name of ["Team_X", "tëam.example", "-team.example", "al"])
				expect((await t.as(x.admin.token, "POST", "/auth/grants", { subject: `${name}@${x.domain}`, action: "read", object: "content:posts" })).body).toEqual(
					errorBody(400, `subject: invalid name '${name}' before @${x.domain}: a 24-hex id, a username or ${GROUP_RULE}`),
				);
		}
		// The other tenant's domain stays refused, whatever the name.
		expect((await t.as(t.b.admin.token, "POST", "/auth/grants", { subject: `team-x.example@${t.a.domain}`, action: "read", object: "content:posts" })).body).toEqual(
			errorBody(400, `subject: domain '${t.a.domain}' is not registered for client ${t.b.client.id} (register it on that client, or grant as the operator)`),
		);
	});

	test("hostile input: a huge entry, a long list, odd types answer 400 without echoing the entry", async () => {
		const huge = `${"x".repeat(200_000)}.example`;
		const r1 = await t.as(t.a.admin.token, "POST", "/content/notes", { title: "huge", groups: [huge] });
		expect(r1.body).toEqual(NOT_GROUP("groups[0]"));
		const r2 = await t.as(t.a.admin.token, "POST", "/identity/users", { username: "huge", password: "Huge-pw-123", subjects: [huge] });
		expect(r2.body).toEqual(NOT_SUBJECT("subjects[0]"));
		expect(r1.text.length + r2.text.length).toBeLessThan(1000);
		expect((await t.as(t.a.admin.token, "POST", "/content/notes", { title: "long", groups: Array(1001).fill("team.example") })).body).toEqual(
			errorBody(400, "groups accepts at most 1000 items"),
		);
		expect((await t.as(t.a.admin.token, "POST", "/content/notes", { title: "odd", groups: [{ $ne: null }] })).body).toEqual(errorBody(400, "groups[0] must be a string"));
		expect((await t.as(t.a.admin.token, "POST", "/content/notes", { title: "odd", groups: { "0": "team.example" } })).body).toEqual(errorBody(400, "groups must be an array"));
	});
});
