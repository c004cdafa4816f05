/**
 * Conformance details (issue "Operating it", item 10), on both document stores: config values by key (CQRS, RBAC),
 * requested scopes, a user's `groups`, the `download` grant action, the fixed failed-login window; and the bulk body
 * and `?ref=true` as docs/api.md now describes them (item 9).
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { clearLoginFailures, errorBody, kvOf, rootAccountCounter, sleep, ttlOf } from "../helpers/auth";
import { MemoryKeyValue } from "../../runtime/kv";
import { FailureCounter } from "../../services/auth/failure-limits";
import { GROUP_RULE } from "../../lib/validate";

const CQRS_SHAPE = "{ webhook: <http(s) URL>, secret?, authorization? }";

describe("conformance", () => {
	let p: TestPlatform;
	let root: string;
	beforeAll(async () => {
		p = await bootPlatform({});
		root = await p.rootToken();
	}, 120_000);
	afterAll(() => p?.cleanup());
	beforeEach(() => clearLoginFailures(p));

	const config = (body: Record<string, unknown>) => p.http("POST", "/context/configs", { token: root, body });
	const tokenWith = (extra: Record<string, unknown>) =>
		p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password, ...extra } });

	describe("config values by key", () => {
		test("CQRS: an object whose webhook is an http(s) URL, else 400", async () => {
			const NOT_URL = errorBody(400, `value.webhook must be an http(s) URL (a CQRS value is ${CQRS_SHAPE})`);
			for (const value of [{ webhook: 5 }, { a: 1 }, { webhook: "not a url" }, { webhook: "ftp://hooks.example/x" }, { webhook: "javascript:alert(1)" }])
				expect({ value, body: (await config({ key: "CQRS", value })).body }).toEqual({ value, body: NOT_URL });
			for (const value of [[1], "https://hooks.example/x"])
				expect({ value, body: (await config({ key: "CQRS", value })).body }).toEqual({ value, body: errorBody(400, `value of a CQRS config must be an object ${CQRS_SHAPE}`) });
			const ok = await config({ key: "CQRS", value: { webhook: "https://hooks.example/platform", secret: "whsec_0123456789abcdef" } });
			expect(ok.status).toBe(200);
			expect(ok.body.data.value).toEqual({ webhook: "https://hooks.example/platform" });
			// A patch is checked too, and so is a config that becomes CQRS by its key.
			expect((await p.http("PATCH", `/context/configs/${ok.body.data.id}`, { token: root, body: { value: { webhook: 5 } } })).body).toEqual(NOT_URL);
			const note = (await config({ key: "NOTE", value: { a: 1 } })).body.data;
			expect((await p.http("PATCH", `/context/configs/${note.id}`, { token: root, body: { key: "CQRS" } })).body).toEqual(NOT_URL);
		});

		test("RBAC: an array of { domain, roles, permissions } whose names and expansions resolve, else 400 naming the place", async () => {
			const domain = p.root.domain;
			const cases: Array<[unknown, string]> = [
				[{ a: 1 }, "value of an RBAC config must be an array of { domain, roles: { <role>: [<permission>] }, permissions: { <permission>: [<action>:<service>:<collection>] } }"],
				[[1], "value[0] must be an object { domain, roles, permissions }"],
				[[{ a: 1 }], "value[0].a is not a field of an RBAC entry (domain, roles, permissions)"],
				[[{ roles: {}, permissions: {} }], "value[0].domain must be a domain name of the client"],
				[[{ domain, roles: {}, permissions: [] }], "value[0].permissions must be an object mapping a permission name to grant expansions"],
				[
					[{ domain, roles: { editor: ["rw"] }, permissions: { rw: "write:content:notes" } }],
					"value[0].permissions.rw must be an array of <action>:<service>:<collection> (or <action>:<service>:*)",
				],
				[
					[{ domain, roles: { editor: ["rw"] }, permissions: { rw: ["write content"] } }],
					"value[0].permissions.rw[0] must be <action>:<service>:<collection> or <action>:<service>:*",
				],
				[
					[{ domain, roles: { editor: ["rw"] }, permissions: { rw: ["write:content:nope"] } }],
					"value[0].permissions.rw[0]: 'content:nope' is not a collection (collections of content: notes, posts, tickets; or content:* for all)",
				],
				[[{ domain, roles: [], permissions: {} }], "value[0].roles must be an object mapping a role to permission names"],
				[[{ domain, roles: { "a b": [] }, permissions: {} }], "value[0].roles: 'a b' is not a role name"],
				[[{ domain, roles: { editor: "rw" }, permissions: { rw: [] } }], "value[0].roles.editor must be an array of permission names"],
				[[{ domain, roles: { editor: ["missing"] }, permissions: { rw: ["write:content:notes"] } }], "value[0].roles.editor[0] must name a permission of value[0].permissions"],
			];
			for (const [value, message] of cases) expect({ value, body: (await config({ key: "RBAC", value })).body }).toEqual({ value, body: errorBody(400, message) });
			const good = [{ domain, roles: { editor: ["rw"], "@viewer": ["r"] }, permissions: { rw: ["write:content:notes"], r: ["read:content:*"] } }];
			const ok = await config({ key: "RBAC", value: good });
			expect(ok.status).toBe(200);
			expect(ok.body.data.value).toEqual(good);
			expect((await config({ key: "RBAC", value: [] })).status).toBe(200);
		});
	});

	test("requested scopes: <action>:<service>[:<collection>] of the catalog or whole, else 400 (the value not echoed)", async () => {
		const cases: Array<[string[], string]> = [
			[["bogus"], "scopes[0] is not a scope: use <action>:<service>[:<collection>] (e.g. read:content:notes) or whole"],
			[["read:content:notes", "READ:content"], "scopes[1] is not a scope: use <action>:<service>[:<collection>] (e.g. read:content:notes) or whole"],
			[["read:nope"], "scopes[0] names an unknown service"],
			[["read:content:nope"], "scopes[0] names an unknown collection of content"],
		];
		for (const [scopes, message] of cases) expect({ scopes, body: (await tokenWith({ scopes })).body }).toEqual({ scopes, body: errorBody(400, message) });
		// The form's space-delimited `scope` is checked the same way.
		const form = new URLSearchParams({ grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password, scope: "read:content bogus" });
		const r = await p.http("POST", "/auth/token", { raw: form.toString(), headers: { "content-type": "application/x-www-form-urlencoded" } });
		expect(r.body).toEqual(errorBody(400, "scopes[1] is not a scope: use <action>:<service>[:<collection>] (e.g. read:content:notes) or whole"));
		for (const scopes of [["read:content:notes"], ["manage:content:*", "send:touch:emails"], ["whole"]]) {
			const t = await tokenWith({ scopes });
			expect({ scopes, status: t.status, scope: t.body.data?.scope }).toEqual({ scopes, status: 200, scope: scopes.join(" ") });
		}
	});

	test("a user's `groups` entries are an email or a domain name (spec: Email or FQDN list)", async () => {
		const NOT_GROUP = (i: number) => errorBody(400, `groups[${i}] must be ${GROUP_RULE}`);
		expect((await p.http("POST", "/identity/users", { token: root, body: { username: "grouped", password: "Grouped-pw-1", groups: ["team-x"] } })).body).toEqual(NOT_GROUP(0));
		const u = await p.http("POST", "/identity/users", { token: root, body: { username: "grouped", password: "Grouped-pw-1", groups: ["team@root.local", "eng.root.local"] } });
		expect(u.status).toBe(200);
		expect(u.body.data.groups).toEqual(["team@root.local", "eng.root.local"]);
		expect((await p.http("PATCH", `/identity/users/${u.body.data.id}`, { token: root, body: { groups: ["eng.root.local", "a b"] } })).body).toEqual(NOT_GROUP(1));
	});

	test("the `download` grant action authorises downloads; without it or `read`, 404", async () => {
		const grant = (subject: string, action: string) => p.http("POST", "/auth/grants", { token: root, body: { subject, action, object: "special:files" } });
		const ids: Record<string, string> = {};
		const user = async (username: string, actions: string[]) => {
			ids[username] = (await p.http("POST", "/identity/users", { token: root, body: { username, password: `${username}-Secret-1` } })).body.data.id;
			for (const a of actions) expect((await grant(`${ids[username]}@${p.root.domain}`, a)).status).toBe(200);
			return (await tokenWith({ username, password: `${username}-Secret-1` })).body.data.access_token as string;
		};
		const downloader = await user("downloader", ["upload", "download"]);
		const uploader = await user("uploader", ["upload"]);
		const up = async (token: string, content: string) => {
			const fd = new FormData();
			fd.append("file", new Blob([content], { type: "text/plain" }), "f.txt");
			const res = await fetch(`${p.url}/special/files/upload`, { method: "POST", body: fd, headers: { authorization: `Bearer ${token}` } });
			expect(res.status).toBe(200);
			return ((await res.json()) as any).items[0].id as string;
		};
		const download = (id: string, token: string) => fetch(`${p.url}/special/files/${id}/download`, { headers: { authorization: `Bearer ${token}` } });
		const mine = await up(downloader, "fetched with a download grant");
		const r = await download(mine, downloader);
		expect(r.status).toBe(200);
		expect(await r.text()).toBe("fetched with a download grant");
		// The record itself is not readable with a download grant alone.
		expect((await p.http("GET", `/special/files/${mine}`, { token: downloader })).status).toBe(403);
		// Neither download nor read: the file does not exist for its own uploader.
		const other = await up(uploader, "no way down");
		const refused = await download(other, uploader);
		expect(refused.status).toBe(404);
		expect(await refused.json()).toEqual(errorBody(404, "document not found"));
		// A read view downloads as before.
		expect((await grant(`${ids.uploader}@${p.root.domain}`, "read")).status).toBe(200);
		expect((await download(other, uploader)).status).toBe(200);
	});

	test("the failed-login window is fixed at its first failure: later failures do not move its end", async () => {
		const KEY = rootAccountCounter(p);
		expect((await tokenWith({ password: "wrong-password-1" })).status).toBe(401);
		const first = (await ttlOf(kvOf(p), KEY))!;
		expect(first).toBeGreaterThan(14 * 60_000);
		await sleep(1200);
		expect((await tokenWith({ password: "wrong-password-2" })).status).toBe(401);
		expect(await kvOf(p).get(KEY)).toBe("2");
		// Before: every failure set the counter's life to 15 minutes again.
		expect((await ttlOf(kvOf(p), KEY))!).toBeLessThanOrEqual(first - 1000);
	});

	test("bulk create takes { items: [...] }, GET /:ref?ref=true finds by ref (docs/api.md)", async () => {
		const array = await p.http("POST", "/content/notes/bulk", { token: root, body: [{ title: "in an array" }] });
		expect(array.body).toEqual(errorBody(400, "items must be an array"));
		const made = await p.http("POST", "/content/notes/bulk", { token: root, body: { items: [{ title: "one", ref: "NOTE-1" }, { title: "two" }] } });
		expect(made.body.total).toBe(2);
		const byRef = await p.http("GET", "/content/notes/NOTE-1?ref=true", { token: root });
		expect({ status: byRef.status, title: byRef.body.data?.title }).toEqual({ status: 200, title: "one" });
	});
});

describe("the failure counter's window (services/auth/failure-limits.ts)", () => {
	const WINDOW = 15 * 60_000;
	const limits = [{ key: "auth:fail:10.0.0.1", limit: 10, message: "too many failed login attempts from this IP" }];
	let now = Date.parse("2026-11-26T10:00:00Z");
	let kv: MemoryKeyValue;
	let counter: FailureCounter;
	beforeEach(() => {
		jest.spyOn(Date, "now").mockImplementation(() => now);
		kv = new MemoryKeyValue();
		counter = new FailureCounter(kv, WINDOW);
	});
	afterEach(async () => {
		jest.restoreAllMocks();
		await kv.close();
	});
	const limited = () =>
		counter.assertBelow(limits).then(
			() => null,
			(e) => ({ code: e.code, message: e.message, retryAfter: e.data?.retryAfter }),
		);

	test("ten failures ten minutes apart never add up to the limit", async () => {
		for (let i = 0; i < 12; i++) {
			await counter.count(limits);
			expect({ i, limited: await limited() }).toEqual({ i, limited: null });
			now += 10 * 60_000;
		}
	});

	test("ten failures within 15 minutes of the first block for 15 minutes from the tenth", async () => {
		await counter.count(limits);
		now += 14 * 60_000;
		for (let i = 0; i < 9; i++) await counter.count(limits);
		expect(await limited()).toEqual({ code: 429, message: "too many failed login attempts from this IP", retryAfter: 900 });
		now += 14 * 60_000;
		expect(await limited()).toEqual({ code: 429, message: "too many failed login attempts from this IP", retryAfter: 60 });
		now += 60_001;
		expect(await limited()).toBeNull();
		// The next failure opens a new window.
		expect(await counter.count(limits)).toEqual([1]);
	});
});
