/**
 * A user's tokens are decided with what the user holds now (authority/authenticate.ts): a role or group taken away
 * stops counting within 2 s on REST and on open live cursors, though the token still carries it (it lives up to 900 s);
 * the other tenant's role of the same name is untouched; a deactivated user's tokens answer 401. On both document
 * stores, with the two tenants of bootTenancy (role @editor: manage on every service, granted in each tenant's domain).
 */
import { performance } from "perf_hooks";
import { bootTenancy, ok, type Tenancy, type Tenant } from "../helpers/tenants";
import { openStream, type LiveStream } from "../helpers/live-sse";
import { errorBody } from "../helpers/auth";

jest.setTimeout(120_000);

describe("the user's current roles, groups and state decide its tokens,", () => {
	let T: Tenancy;
	const open: LiveStream[] = [];

	beforeAll(async () => {
		T = await bootTenancy();
	});
	afterAll(async () => {
		for (const s of open) s.close();
		await T?.cleanup();
	});

	/** A user of tenant `t` holding `subjects`, and its access token. */
	async function user(t: Tenant, username: string, subjects: string[]) {
		const password = `pw-${username}-Secret1`;
		const doc = (await ok(T.as(t.clientToken, "POST", "/identity/users", { username, password, subjects }), `user ${username}`)).data;
		return { id: doc.id as string, token: await T.login(t, username, password) };
	}
	async function live(token: string): Promise<LiveStream> {
		const s = await openStream(`${T.p.url}/content/notes/cursor?live=true`, { authorization: `Bearer ${token}` });
		open.push(s);
		await s.waitFor((f) => f.event === "live");
		return s;
	}
	const note = async (token: string, body: Record<string, unknown>) => (await ok(T.as(token, "POST", "/content/notes", body), "note")).data;
	const entered = (s: LiveStream, id: string) => s.waitFor((f) => f.event === "change" && JSON.parse(f.data).id === id && JSON.parse(f.data).op === "enter", 5000);
	/** Asks `GET path` with `token` until its status is no longer `was`, at most 2 s; the answer and when it came. */
	async function untilChanged(token: string, path: string, was: number, since: number) {
		for (;;) {
			const r = await T.as(token, "GET", path);
			const ms = performance.now() - since;
			if (r.status !== was || ms > 2000) return { r, ms };
			await new Promise((res) => setTimeout(res, 20));
		}
	}

	test("the role removed: REST 403 and the live cursor delivers nothing more within 2 s; the other tenant's @editor keeps working", async () => {
		const ua = await user(T.a, "leaver", ["@editor"]);
		const ub = await user(T.b, "leaver", ["@editor"]);
		for (const u of [ua, ub]) expect((await T.as(u.token, "GET", "/content/notes")).status).toBe(200);
		const sa = await live(ua.token);
		const sb = await live(ub.token);
		const before = await note(T.a.admin.token, { title: "shared before", shares: [ua.id] });
		await entered(sa, before.id);

		const t0 = performance.now();
		await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${ua.id}`, { subjects: [] }), "remove @editor");
		const { r, ms } = await untilChanged(ua.token, "/content/notes", 200, t0);
		expect({ status: r.status, body: r.body }).toEqual({ status: 403, body: errorBody(403, "no grant for read on content:notes") });
		expect(ms).toBeLessThan(2000);
		// The token still carries the role; what it is decided with has lost it.
		const verified = (await ok(T.as(ua.token, "GET", "/auth/verify"), "verify")).data;
		expect(verified.subject).toBe(`${ua.id}@${T.a.domain} leaver@${T.a.domain}`);

		// A note shared with the user now is not delivered: tenant b's stream, on the same feed, gets a later note first.
		const after = await note(T.a.admin.token, { title: "shared after", shares: [ua.id] });
		const later = await note(ub.token, { title: "b's own, later" });
		await entered(sb, later.id);
		expect(sa.text()).not.toContain(after.id);
		expect(sa.frames.some((f) => f.event === "error")).toBe(false);
		// Tenant b's user of the same name with the same role is untouched, on REST too.
		expect((await T.as(ub.token, "GET", "/content/notes")).status).toBe(200);
		expect((await ok(T.as(ub.token, "GET", "/auth/verify"), "verify b")).data.subject).toBe(`@editor@${T.b.domain} ${ub.id}@${T.b.domain} leaver@${T.b.domain}`);

		// Given back: the token, which carries it, counts it again.
		const t1 = performance.now();
		await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${ua.id}`, { subjects: ["@editor"] }), "give @editor back");
		const back = await untilChanged(ua.token, "/content/notes", 403, t1);
		expect([back.r.status, back.ms < 2000]).toEqual([200, true]);
	});

	test("a group removed: its documents leave the group zone within 2 s", async () => {
		const u = await user(T.a, "grouped", ["@editor", "team-q.example"]);
		const doc = await note(T.a.admin.token, { title: "for the team", groups: ["team-q.example"] });
		const path = `/content/notes/${doc.id}?zone=group`;
		expect((await T.as(u.token, "GET", path)).status).toBe(200);
		const t0 = performance.now();
		await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${u.id}`, { subjects: ["@editor"] }), "remove the group");
		const { r, ms } = await untilChanged(u.token, path, 200, t0);
		expect({ status: r.status, body: r.body }).toEqual({ status: 404, body: errorBody(404, "document not found") });
		expect(ms).toBeLessThan(2000);
	});

	test("deactivated: REST 401 and the live cursor ends with a 401 frame within 2 s; the other tenant's user works on", async () => {
		const ua = await user(T.a, "deactivated", ["@editor"]);
		const ub = await user(T.b, "deactivated", ["@editor"]);
		const sa = await live(ua.token);
		const t0 = performance.now();
		await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${ua.id}`, { status: "INACTIVE" }), "deactivate");
		const { r, ms } = await untilChanged(ua.token, "/content/notes", 200, t0);
		expect({ status: r.status, body: r.body }).toEqual({ status: 401, body: errorBody(401, "session is revoked") });
		expect(ms).toBeLessThan(2000);
		const err = await sa.waitFor((f) => f.event === "error", 2500);
		expect(err.at - t0).toBeLessThan(2000);
		expect(JSON.parse(err.data)).toEqual(errorBody(401, "session is revoked"));
		expect((await T.as(ub.token, "GET", "/content/notes")).status).toBe(200);
	});
});
