import { expandRbac, fieldsAllowed, Grant, GrantIndex, matchNothing, pickFields, timeWindowOpen, validateGrant } from "../../lib/grants";
import type { TokenClaims } from "../../lib/types";
import { SCENARIO_UID, scenarioGrants, scenarioRequest, scenarioToken } from "../../bench/grant-scenario";

const DOMAINS = ["root.local", "acme.io"];
/** The caller of the decision tests: the benchmark's scenario token (bench/grant-scenario.ts). */
const UID = SCENARIO_UID;
const token: TokenClaims = scenarioToken;
const SUBJECTS = token.subject.split(" ");

const ok = (body: Record<string, unknown>) => () => validateGrant({ subject: "@editor@root.local", action: "read", object: "content:notes", ...body }, DOMAINS);
const bad = (body: Record<string, unknown>, message: string | RegExp) => {
	let err: unknown;
	try {
		validateGrant({ subject: "@editor@root.local", action: "read", object: "content:notes", ...body }, DOMAINS);
	} catch (e) {
		err = e;
	}
	expect(err).toMatchObject({ code: 400 });
	expect((err as Error).message).toMatch(message);
};

describe("validateGrant: subjects", () => {
	test.each([
		"@editor@root.local",
		"@content-admin@acme.io",
		`${UID}@root.local`,
		"b2b2b2b2b2b2b2b2b2b2b2b2@acme.io",
		"alice@root.local",
		"alice.smith@ACME.IO",
		"eng@acme.com@root.local",
		"eng.acme.com@root.local",
	])("valid: %s", (subject) => {
		expect(ok({ subject })).not.toThrow();
	});

	test.each<[unknown, RegExp]>([
		[undefined, /^subject: is required/],
		["", /^subject: is required/],
		[42, /^subject: is required/],
		["@editor", /^subject: role '@editor' needs a domain suffix/],
		["@editor@other.local", /^subject: domain 'other.local' is not registered/],
		["@@root.local", /^subject: invalid role name ''/],
		["@ed!tor@root.local", /^subject: invalid role name 'ed!tor'/],
		["@a@b@root.local", /^subject: '@a@b@root.local' is not of the form @role@domain/],
		["alice@nowhere", /^subject: domain 'nowhere' is not registered/],
		[`${UID}@acme.com`, /^subject: domain 'acme.com' is not registered/],
		["x@y@acme.com", /^subject: domain 'acme.com' is not registered/],
		["editors", /^subject: 'editors' needs a domain suffix/],
		["eng.acme.com", /^subject: 'eng.acme.com' needs a domain suffix/],
		["eng@acme.com", /^subject: domain 'acme.com' is not registered/],
		["alice smith@root.local", /^subject: must not contain whitespace/],
		["al!ce@root.local", /^subject: invalid name 'al!ce'/],
		["alice@bad_domain", /^subject: invalid domain 'bad_domain'/],
		["@root.local", /needs a domain suffix/],
	])("invalid: %p", (subject, message) => {
		bad({ subject }, message);
	});
});

describe("validateGrant: action, object, field, filter, location, time", () => {
	test("action", () => {
		expect(ok({ action: "send" })).not.toThrow();
		expect(ok({ action: "custom_publish-2" })).not.toThrow();
		for (const action of ["Read", "1read", "", "a".repeat(33), undefined, "read:x"]) bad({ action }, /^action: /);
	});
	test("object", () => {
		expect(ok({ object: "essential:saga-stages" })).not.toThrow();
		expect(ok({ object: "content:*" })).not.toThrow();
		for (const object of ["content", "Content:notes", "content:*x", "content:notes:x", ":notes", "content:", 7]) bad({ object }, /^object: /);
	});
	test("field", () => {
		expect(ok({ field: ["title", "props.color", "created_at"] })).not.toThrow();
		expect(ok({ field: null })).not.toThrow();
		bad({ field: "title" }, /^field: must be an array/);
		bad({ field: ["title", "a..b"] }, /^field\[1\]: invalid field name/);
		bad({ field: ["$where"] }, /^field\[0\]: /);
		bad({ field: ["a.__proto__"] }, /^field\[0\]: forbidden key/);
		bad({ field: [1] }, /^field\[0\]: must be a field path/);
	});
	test("filter", () => {
		expect(ok({ filter: ['{"owner":"{{token.uid}}"}', '{"age":{"$gte":18}}'] })).not.toThrow();
		bad({ filter: ["{bad"] }, /^filter\[0\]: is not valid JSON/);
		bad({ filter: ['{"a":1}', "[1]"] }, /^filter\[1\]: must be a JSON object/);
		bad({ filter: ['"x"'] }, /^filter\[0\]: must be a JSON object/);
		bad({ filter: ['{"$where":"sleep(1)"}'] }, /^filter\[0\]: operator \$where is not allowed/);
		bad({ filter: ['{"a":{"$bogus":1}}'] }, /^filter\[0\]: unknown operator \$bogus/);
		bad({ filter: [{ a: 1 }] }, /^filter\[0\]: must be a JSON text/);
	});
	test("location", () => {
		expect(ok({ location: ["10.0.0.0/8", "192.168.1.7", "::1", "2001:db8::/32"] })).not.toThrow();
		bad({ location: ["10.0.0.0/33"] }, /^location\[0\]: must be an IP address or CIDR range/);
		bad({ location: ["10.0.0.1", "example.com"] }, /^location\[1\]: /);
	});
	test("time", () => {
		expect(
			ok({
				time: [
					{ cron_exp: "0 9 * * 1-5", duration: 3600 },
					{ cron_exp: "*/10 * * * * *", duration: 5 },
				],
			}),
		).not.toThrow();
		bad({ time: [{ cron_exp: "* * * *", duration: 60 }] }, /^time\[0\]\.cron_exp: a cron expression has 5 or 6 fields, got 4/);
		bad({ time: [{ cron_exp: "* * * * * * *", duration: 60 }] }, /^time\[0\]\.cron_exp: .*got 7/);
		bad({ time: [{ cron_exp: "61 * * * *", duration: 60 }] }, /^time\[0\]\.cron_exp: invalid cron expression/);
		bad({ time: [{ cron_exp: "0 0 30 2 *", duration: 60 }] }, /^time\[0\]\.cron_exp: /);
		bad({ time: [{ cron_exp: "", duration: 60 }] }, /^time\[0\]\.cron_exp: must be a cron expression/);
		for (const duration of [0, -5, 1.5, "60", undefined]) bad({ time: [{ cron_exp: "0 9 * * *", duration }] }, /^time\[0\]\.duration: /);
		bad({ time: ["0 9 * * *"] }, /^time\[0\]: must be an object/);
	});
	test("body must be an object", () => {
		expect(() => validateGrant(null, DOMAINS)).toThrow(/^grant: body must be an object/);
		expect(() => validateGrant([], DOMAINS)).toThrow(/^grant: body must be an object/);
	});
});

describe("expandRbac", () => {
	test("roles × permissions × expansions, with or without leading @, skipping malformed", () => {
		const grants = expandRbac([
			{
				domain: "root.local",
				roles: { "@editor": ["notes-rw", "unknown-perm"], viewer: ["notes-r"] },
				permissions: {
					"notes-rw": ["write:content:notes", "read:content:*", "bad-expansion", "read:content:notes:extra"],
					"notes-r": ["read:content:notes"],
				},
			},
			{ domain: "acme.io", roles: { "@ops": ["ships"] }, permissions: { ships: ["manage:logistic:*", "manage:logistic:*"] } },
			{ roles: {}, permissions: {} },
			"garbage",
		]);
		expect(grants).toEqual([
			{ subject: "@editor@root.local", action: "write", object: "content:notes" },
			{ subject: "@editor@root.local", action: "read", object: "content:*" },
			{ subject: "@viewer@root.local", action: "read", object: "content:notes" },
			{ subject: "@ops@acme.io", action: "manage", object: "logistic:*" },
		]);
		expect(expandRbac(undefined)).toEqual([]);
		expect(expandRbac({ domain: "x" })).toEqual([]);
	});
	test("virtual grants decide like stored grants", () => {
		const index = new GrantIndex(expandRbac([{ domain: "root.local", roles: { editor: ["p"] }, permissions: { p: ["write:content:notes"] } }]));
		expect(index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", token }).granted).toBe(true);
		expect(index.decide({ subjects: SUBJECTS, action: "manage", object: "content:notes", token }).granted).toBe(false);
	});
});

describe("GrantIndex.decide: subject, action, object", () => {
	const g = (over: Partial<Grant>): Grant => ({ subject: "@editor@root.local", action: "read", object: "content:notes", ...over });

	test("subject must be one of the caller's subjects", () => {
		const index = new GrantIndex([g({ subject: "@admin@root.local" }), g({ subject: `${UID}@acme.io` })]);
		const d = index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", token });
		expect(d).toEqual({ granted: false, policies: [], fields: null, rowFilter: null, reason: "none" });
		expect(index.decide({ subjects: [`${UID}@acme.io`], action: "read", object: "content:notes", token }).granted).toBe(true);
	});

	test("elevation table both ways; other actions exact", () => {
		const cases: [string, string, boolean][] = [
			["manage", "manage", true],
			["manage", "write", true],
			["manage", "read", true],
			["write", "manage", false],
			["write", "write", true],
			["write", "read", true],
			["read", "manage", false],
			["read", "write", false],
			["read", "read", true],
			["send", "send", true],
			["manage", "send", false],
			["send", "read", false],
			["publish", "publish", true],
		];
		for (const [held, asked, expected] of cases) {
			const index = new GrantIndex([g({ action: held })]);
			expect([held, asked, index.decide({ subjects: SUBJECTS, action: asked, object: "content:notes", token }).granted]).toEqual([held, asked, expected]);
		}
	});

	test("service:* fallback unless strictObj; never another service or collection", () => {
		const wildcard = g({ object: "content:*" });
		const index = new GrantIndex([wildcard]);
		const d = index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", token });
		expect(d.granted).toBe(true);
		expect(d.policies).toEqual([wildcard]);
		expect(index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", strictObj: true, token }).granted).toBe(false);
		expect(index.decide({ subjects: SUBJECTS, action: "read", object: "content:*", strictObj: true, token }).granted).toBe(true);
		expect(index.decide({ subjects: SUBJECTS, action: "read", object: "identity:users", token }).granted).toBe(false);
		const exact = new GrantIndex([g({ object: "content:posts" })]);
		expect(exact.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", token }).granted).toBe(false);
	});

	test("exact grants of several subjects combine (OR); service:* is only the retry when no exact grant applies", () => {
		const a = g({ subject: "@editor@root.local", field: ["title"] });
		const b = g({ subject: "alice@root.local", object: "content:*", field: ["content"] });
		const c = g({ subject: "alice@root.local", action: "write", field: ["tags"] });
		const index = new GrantIndex([a, b, c]);
		const d = index.decide({ subjects: [...SUBJECTS, "alice@root.local"], action: "read", object: "content:notes", token });
		expect(d.granted).toBe(true);
		expect(d.policies).toHaveLength(2);
		expect(d.policies).toEqual(expect.arrayContaining([a, c]));
		expect(d.fields?.sort()).toEqual(["tags", "title"]);
		const wildOnly = index.decide({ subjects: SUBJECTS, action: "read", object: "content:posts", token });
		expect(wildOnly.policies).toEqual([b]);
		expect(wildOnly.fields).toEqual(["content"]);
		expect(index.decide({ subjects: SUBJECTS, action: "read", object: "content:posts", strictObj: true, token }).granted).toBe(false);
	});

	test("forSubjects lists every grant of the subjects", () => {
		const a = g({});
		const b = g({ object: "identity:users" });
		const index = new GrantIndex([a, b, g({ subject: "other@root.local" })]);
		expect(index.forSubjects(SUBJECTS)).toEqual([a, b]);
		expect(index.size).toBe(3);
	});
});

describe("GrantIndex.decide: location", () => {
	const grant: Grant = { subject: "alice@root.local", action: "read", object: "content:notes", location: ["10.0.0.0/8", "2001:db8::1"] };
	const index = new GrantIndex([grant]);
	const ask = (ip?: string) => index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", ip, token });
	test("in the list", () => {
		expect(ask("10.1.2.3").granted).toBe(true);
		expect(ask("::ffff:10.1.2.3").granted).toBe(true);
		expect(ask("2001:db8::1").granted).toBe(true);
	});
	test("out of the list or no ip: denied with reason location", () => {
		expect(ask("11.0.0.1")).toEqual({ granted: false, policies: [], fields: null, rowFilter: null, reason: "location" });
		expect(ask(undefined).reason).toBe("location");
	});
	test("empty list allows all; another grant without location widens", () => {
		const i2 = new GrantIndex([{ ...grant, location: [] }]);
		expect(i2.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", ip: "8.8.8.8", token }).granted).toBe(true);
		const i3 = new GrantIndex([grant, { subject: "@editor@root.local", action: "read", object: "content:*" }]);
		const d = i3.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", ip: "8.8.8.8", token });
		expect(d.granted).toBe(true);
		expect(d.policies).toHaveLength(1);
	});
});

describe("time windows", () => {
	const weekdays9to10 = [{ cron_exp: "0 9 * * 1-5", duration: 3600 }];
	test("open from the fire time, closed at fire + duration (UTC)", () => {
		// 2024-05-01 is a Wednesday.
		expect(timeWindowOpen(weekdays9to10, new Date("2024-05-01T09:00:00.000Z"))).toBe(true);
		expect(timeWindowOpen(weekdays9to10, new Date("2024-05-01T09:30:00Z"))).toBe(true);
		expect(timeWindowOpen(weekdays9to10, new Date("2024-05-01T09:59:59.999Z"))).toBe(true);
		expect(timeWindowOpen(weekdays9to10, new Date("2024-05-01T10:00:00Z"))).toBe(false);
		expect(timeWindowOpen(weekdays9to10, new Date("2024-05-01T08:59:59.999Z"))).toBe(false);
		expect(timeWindowOpen(weekdays9to10, new Date("2024-05-04T09:30:00Z"))).toBe(false); // Saturday
		// back in time after a cached later computation
		expect(timeWindowOpen(weekdays9to10, new Date("2024-04-30T09:10:00Z").getTime())).toBe(true);
	});
	test("evaluated in the given timezone", () => {
		const nineTokyo = [{ cron_exp: "0 9 * * *", duration: 3600 }];
		// 09:30 in Tokyo is 00:30 UTC.
		expect(timeWindowOpen(nineTokyo, new Date("2024-05-01T00:30:00Z"), "Asia/Tokyo")).toBe(true);
		expect(timeWindowOpen(nineTokyo, new Date("2024-05-01T00:30:00Z"), "UTC")).toBe(false);
		expect(timeWindowOpen(nineTokyo, new Date("2024-05-01T09:30:00Z"), "Asia/Tokyo")).toBe(false);
		expect(timeWindowOpen(nineTokyo, new Date("2024-05-01T09:30:00Z"))).toBe(true);
		// New York in summer time: 09:30 EDT is 13:30 UTC.
		expect(timeWindowOpen(nineTokyo, new Date("2024-07-01T13:30:00Z"), "America/New_York")).toBe(true);
		expect(() => timeWindowOpen(nineTokyo, Date.now(), "Mars/Olympus")).toThrow(/tz: unknown timezone/);
	});
	test("6-field cron with seconds; several windows OR; none means open", () => {
		const every10s = [{ cron_exp: "*/10 * * * * *", duration: 5 }];
		expect(timeWindowOpen(every10s, new Date("2024-05-01T12:00:13Z"))).toBe(true);
		expect(timeWindowOpen(every10s, new Date("2024-05-01T12:00:17Z"))).toBe(false);
		const two = [...weekdays9to10, { cron_exp: "0 18 * * *", duration: 1800 }];
		expect(timeWindowOpen(two, new Date("2024-05-04T18:10:00Z"))).toBe(true);
		expect(timeWindowOpen(two, new Date("2024-05-04T18:40:00Z"))).toBe(false);
		expect(timeWindowOpen([], new Date())).toBe(true);
		expect(timeWindowOpen(null, new Date())).toBe(true);
		expect(timeWindowOpen([{ cron_exp: "not a cron", duration: 60 }], new Date())).toBe(false);
	});
	test("decide: closed window denies with reason time; tz is honoured", () => {
		const index = new GrantIndex([{ subject: "alice@root.local", action: "read", object: "content:notes", time: [{ cron_exp: "0 9 * * *", duration: 3600 }] }]);
		const ask = (now: string, tz?: string) => index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", now: new Date(now), tz, token });
		expect(ask("2024-05-01T09:15:00Z").granted).toBe(true);
		expect(ask("2024-05-01T11:00:00Z")).toEqual({ granted: false, policies: [], fields: null, rowFilter: null, reason: "time" });
		expect(ask("2024-05-01T00:15:00Z", "Asia/Tokyo").granted).toBe(true);
		expect(ask("2024-05-01T09:15:00Z", "Asia/Tokyo").reason).toBe("time");
	});
	test("decide: a grant failing on time outranks one failing on location in the reason", () => {
		const index = new GrantIndex([
			{ subject: "alice@root.local", action: "read", object: "content:notes", location: ["10.0.0.0/8"] },
			{ subject: "alice@root.local", action: "read", object: "content:notes", time: [{ cron_exp: "0 9 * * *", duration: 60 }] },
		]);
		expect(index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", ip: "1.1.1.1", now: new Date("2024-05-01T12:00:00Z"), token }).reason).toBe("time");
	});
});

describe("GrantIndex.decide: fields and row filters", () => {
	const g = (over: Partial<Grant>): Grant => ({ subject: "alice@root.local", action: "read", object: "content:notes", ...over });
	const decide = (grants: Grant[], t: Record<string, unknown> = token) =>
		new GrantIndex(grants).decide({ subjects: SUBJECTS, action: "read", object: "content:notes", token: t as TokenClaims });

	test("field union; any grant without a field list (or an empty one) means all fields", () => {
		expect(decide([g({ field: ["title", "tags"] }), g({ field: ["tags", "content"] })]).fields).toEqual(["title", "tags", "content"]);
		expect(decide([g({ field: ["title"] }), g({})]).fields).toBeNull();
		expect(decide([g({ field: ["title"] }), g({ field: [] })]).fields).toBeNull();
	});

	test("filters OR across entries and grants, with token variables substituted deeply", () => {
		const d = decide([
			g({ filter: ['{"owner":"{{token.uid}}"}', '{"department":{"$in":["{{token.department}}","all"]}}'] }),
			g({ filter: ['{"$and":[{"region":"{{token.profile.region}}"},{"domain":"{{token.domain}}"}]}', '{"public":true}'] }),
		]);
		expect(d.rowFilter).toEqual({
			$or: [{ owner: UID }, { department: { $in: ["sales", "all"] } }, { $and: [{ region: "eu" }, { domain: "root.local" }] }, { public: true }],
		});
	});

	test("only whole-string variables are replaced", () => {
		const d = decide([g({ filter: ['{"a":"x{{token.uid}}","b":"{{ token.uid }}"}'] })]);
		expect(d.rowFilter).toEqual({ a: "x{{token.uid}}", b: "{{ token.uid }}" });
	});

	test("a single entry is not wrapped; an array claim substitutes as an array", () => {
		const d = decide([g({ filter: ['{"groups":{"$in":"{{token.groups}}"}}'] })], { ...token, groups: ["g1.example", "g2.example"] });
		expect(d.rowFilter).toEqual({ groups: { $in: ["g1.example", "g2.example"] } });
	});

	test("an entry referencing a missing claim is dropped; none left matches nothing", () => {
		const grants = [g({ filter: ['{"app":"{{token.aid}}"}', '{"owner":"{{token.uid}}"}'] })];
		expect(decide(grants).rowFilter).toEqual({ owner: UID });
		const noUser = { ...token, uid: undefined };
		expect(decide(grants, noUser).rowFilter).toEqual(matchNothing());
		expect(matchNothing()).toEqual({ $and: [{ id: { $exists: true } }, { id: { $exists: false } }] });
		expect(decide([g({ filter: ['{"x":"{{token.constructor}}"}'] })]).rowFilter).toEqual(matchNothing());
	});

	test("any applicable grant without a filter lifts the row restriction", () => {
		expect(decide([g({ filter: ['{"owner":"{{token.uid}}"}'] }), g({})]).rowFilter).toBeNull();
	});

	test("row filters are fresh copies each decision", () => {
		const index = new GrantIndex([g({ filter: ['{"tags":{"$in":["a"]}}'] })]);
		const d1 = index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", token });
		(d1.rowFilter as { tags: { $in: string[] } }).tags.$in.push("MUTATED");
		const d2 = index.decide({ subjects: SUBJECTS, action: "read", object: "content:notes", token });
		expect(d2.rowFilter).toEqual({ tags: { $in: ["a"] } });
	});
});

describe("fieldsAllowed / pickFields", () => {
	test("coverage by path prefix; id always; null allows all", () => {
		expect(fieldsAllowed(["title", "props.color", "props", "id", "owner", "meta.a.b"], ["title", "props.color", "meta"])).toEqual(["props", "owner"]);
		expect(fieldsAllowed(["propsx.color"], ["props"])).toEqual(["propsx.color"]);
		expect(fieldsAllowed(["anything", "a.b"], null)).toEqual([]);
		expect(fieldsAllowed(["x", "x"], [])).toEqual(["x"]);
	});
	test("pickFields keeps allowed paths and id, through nested objects and arrays", () => {
		const doc = {
			id: "d1",
			title: "T",
			secret: "s",
			props: { color: "red", size: 3 },
			items: [
				{ name: "a", price: 1 },
				{ name: "b", price: 2 },
			],
			meta: { a: 1 },
		};
		expect(pickFields(doc, ["title", "props.color", "items.name", "meta.a", "meta"])).toEqual({
			id: "d1",
			title: "T",
			props: { color: "red" },
			items: [{ name: "a" }, { name: "b" }],
			meta: { a: 1 },
		});
		expect(pickFields(doc, [])).toEqual({ id: "d1" });
		const all = pickFields(doc, null);
		expect(all).toEqual(doc);
		expect(all).not.toBe(doc);
		expect(pickFields(doc, ["missing.path"])).toEqual({ id: "d1" });
	});
});

describe("decisions with a large store (timing: bench/micro.ts, `npm run bench`)", () => {
	test("10 and 10 000 grants: the caller's exact grants decide, its role's many other grants do not", () => {
		const small = new GrantIndex(scenarioGrants(10));
		const large = new GrantIndex(scenarioGrants(10_000));
		expect(small.size).toBe(10);
		expect(large.size).toBe(10_000);
		for (const index of [small, large]) {
			const d = index.decide(scenarioRequest);
			expect(d.granted).toBe(true);
			// The exact grants apply; alice's content:* grant is only the fallback, so it is not among them.
			expect(d.policies).toHaveLength(2);
			expect(d.fields).toBeNull();
			expect(d.rowFilter).toEqual({ $or: [{ owner: SCENARIO_UID }, { public: true }] });
		}
		// The same answer every time (the index keeps no state between decisions).
		expect(Array.from({ length: 1000 }, () => large.decide(scenarioRequest).granted).every(Boolean)).toBe(true);
	});
});
