/**
 * Issue 25 item 1: live cursors (`/cursor?live=true`, docs/contracts.md "Realtime: live cursors and MQTT in the browser").
 * The matches, `event: live`, then enter / update / leave frames decided at every change with the caller's current
 * view (zones, shares, grant row filter and field list, its query and projection); nothing about documents outside
 * it; tenants apart; revocation ends the stream with a 401 frame within 2 s; Last-Event-ID resumes; 410 beyond the
 * retention; the open-cursor limit. On both document stores.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { changeFrame, liveStreams, type LiveStream } from "../helpers/live-sse";
import { sharedOutbox } from "../../events/outbox";
import { loadKeys } from "../../runtime/config";
import { Positions, streamOf } from "../../services/api/live-position";

jest.setTimeout(120_000);

describe("live cursors", () => {
	let T: Tenancy;
	const streams = liveStreams(() => T.p.url);
	const live = streams.live;

	beforeAll(async () => {
		T = await bootTenancy();
	});
	afterAll(async () => {
		streams.closeAll();
		await T?.cleanup();
	});
	afterEach(() => streams.closeAll());

	const untilLive = (s: LiveStream) => s.waitFor((f) => f.event === "live");
	const note = async (token: string, body: Record<string, unknown>) => (await ok(T.as(token, "POST", "/content/notes", body), "create")).data;
	const patch = (token: string, id: string, body: Record<string, unknown>) => ok(T.as(token, "PATCH", `/content/notes/${id}`, body), "patch");
	const change = changeFrame;
	/** A marker write the caller sees: every change before it has been decided for this stream once its frame is in. */
	async function settle(s: LiveStream, token: string) {
		const m = await note(token, { title: "marker" });
		await change(s, m.id, "enter");
		return m;
	}

	test("the matches, then `event: live` with a position, then enter / update / leave of the caller's own documents", async () => {
		const { member } = T.a;
		const first = await note(member.token, { title: "before" });
		const s = await live(member.token);
		expect(s.status).toBe(200);
		expect(s.headers["content-type"]).toBe("text/event-stream; charset=utf-8");
		const l = await untilLive(s);
		expect(l.data).toBe("{}");
		expect(l.id).toMatch(/^L[A-Za-z0-9_-]{38}$/);
		const listed = s.frames.slice(0, s.frames.indexOf(l));
		expect(listed.map((f) => f.id)).toContain(first.id);
		expect(s.frames.some((f) => f.event === "end")).toBe(false);

		const n = await note(member.token, { title: "fresh", content: "c1" });
		const enter = JSON.parse((await change(s, n.id, "enter")).data);
		const got = (await ok(T.as(member.token, "GET", `/content/notes/${n.id}`), "get")).data;
		expect(enter).toEqual({ op: "enter", id: n.id, data: got });
		await patch(member.token, n.id, { title: "renamed" });
		const upd = JSON.parse((await change(s, n.id, "update")).data);
		expect(upd.data.title).toBe("renamed");
		expect(upd.data).toEqual((await ok(T.as(member.token, "GET", `/content/notes/${n.id}`), "get")).data);
		await ok(T.as(member.token, "DELETE", `/content/notes/${n.id}`), "delete");
		expect(JSON.parse((await change(s, n.id, "leave")).data)).toEqual({ op: "leave", id: n.id });
		await ok(T.as(member.token, "PUT", `/content/notes/${n.id}/restore`), "restore");
		await change(s, n.id, "enter");
		// Positions are opaque, never a document id, and grow in commit order.
		const positions = s.changes().map((c) => c.position);
		for (const p of positions) expect(p).not.toMatch(/^[0-9a-f]{24}$/);
		expect(new Set(positions).size).toBe(positions.length);
	});

	test("shares: a document shared with the caller enters, unshared it leaves; another user's unshared documents are never named", async () => {
		const { admin, member } = T.a;
		const s = await live(member.token);
		await untilLive(s);
		const secret = await note(admin.token, { title: "admin only" });
		const shared = await note(admin.token, { title: "for member", shares: [member.id] });
		expect(JSON.parse((await change(s, shared.id, "enter")).data).data.title).toBe("for member");
		await patch(admin.token, secret.id, { content: "still private" });
		await patch(admin.token, shared.id, { shares: [] });
		await change(s, shared.id, "leave");
		await patch(admin.token, shared.id, { content: "after unsharing" });
		await settle(s, member.token);
		expect(s.text()).not.toContain(secret.id);
		expect(
			s
				.changes()
				.filter((c) => c.id === shared.id)
				.map((c) => c.op),
		).toEqual(["enter", "leave"]);
	});

	test("the grant's row filter and field list: moves in and out of the rows enter and leave, hidden fields are in no frame", async () => {
		const { admin, limited } = T.a;
		await T.grant(admin.token, { subject: limited.subject, action: "read", object: "content:notes", field: ["title", "shares"], filter: [JSON.stringify({ content: "public" })] });
		const token = await T.login(T.a, limited.username, limited.password);
		const s = await live(token);
		await untilLive(s);
		const d = await note(admin.token, { title: "row", content: "draft", shares: [limited.id] });
		await patch(admin.token, d.id, { content: "public" });
		const enter = JSON.parse((await change(s, d.id, "enter")).data);
		expect(enter.data).toEqual({ id: d.id, title: "row", shares: [limited.id] });
		expect(enter.data).toEqual((await ok(T.as(token, "GET", `/content/notes/${d.id}`), "get")).data);
		await patch(admin.token, d.id, { title: "row 2" });
		expect(JSON.parse((await change(s, d.id, "update")).data).data).toEqual({ id: d.id, title: "row 2", shares: [limited.id] });
		await patch(admin.token, d.id, { content: "secret draft" });
		await change(s, d.id, "leave");
		await patch(admin.token, d.id, { title: "while out" });
		const marker = await note(admin.token, { title: "m", content: "public", shares: [limited.id] });
		await change(s, marker.id, "enter");
		expect(
			s
				.changes()
				.filter((c) => c.id === d.id)
				.map((c) => c.op),
		).toEqual(["enter", "update", "leave"]);
		// The hidden field's values and name are in no frame.
		expect(s.text()).not.toMatch(/draft|"content"|while out/);
	});

	test("the caller's query and projection decide the view: patched into the query it enters, out of it it leaves", async () => {
		const { member } = T.a;
		const q = encodeURIComponent(JSON.stringify({ content: "urgent" }));
		const proj = encodeURIComponent(JSON.stringify({ title: 1 }));
		const s = await live(member.token, `&query=${q}&projection=${proj}`);
		await untilLive(s);
		const n = await note(member.token, { title: "q", content: "later" });
		await patch(member.token, n.id, { content: "urgent" });
		expect(JSON.parse((await change(s, n.id, "enter")).data).data).toEqual({ id: n.id, title: "q" });
		await patch(member.token, n.id, { content: "done" });
		await change(s, n.id, "leave");
		const m = await note(member.token, { title: "marker", content: "urgent" });
		await change(s, m.id, "enter");
		expect(
			s
				.changes()
				.filter((c) => c.id === n.id)
				.map((c) => c.op),
		).toEqual(["enter", "leave"]);
	});

	test("two tenants: the same names in tenant b see nothing of tenant a, even in the client zone", async () => {
		const sa = await live(T.a.member.token, "&zone=own,share,group,client");
		const sb = await live(T.b.member.token, "&zone=own,share,group,client");
		await Promise.all([untilLive(sa), untilLive(sb)]);
		const ga = await note(T.a.admin.token, { title: "tenant a" });
		await change(sa, ga.id, "enter");
		const gb = await note(T.b.admin.token, { title: "tenant b" });
		await change(sb, gb.id, "enter");
		// Sharing a's document with b's member is refused: b's member is no user of tenant a.
		const refused = await T.as(T.a.admin.token, "PATCH", `/content/notes/${ga.id}`, { shares: [T.b.member.id] });
		expect(refused.status).toBe(400);
		await settle(sb, T.b.member.token);
		await settle(sa, T.a.member.token);
		expect(sb.text()).not.toContain(ga.id);
		expect(sa.text()).not.toContain(gb.id);
	});

	test("logout ends the stream with a 401 error frame within 2 s; so does deactivating the user", async () => {
		const token = await T.login(T.a, T.a.member.username, T.a.member.password);
		const s = await live(token);
		await untilLive(s);
		const t0 = performance.now();
		await ok(T.as(token, "GET", "/auth/logout"), "logout");
		const err = await s.waitFor((f) => f.event === "error", 2500);
		expect(err.at - t0).toBeLessThan(2000);
		expect(JSON.parse(err.data)).toEqual({ statusCode: 401, message: "session is revoked", error: "Unauthorized" });
		await s.ended;

		const u = (await ok(T.as(T.a.clientToken, "POST", "/identity/users", { username: "live-gone", password: "pw-live-gone-Secret1", subjects: ["@editor"] }), "user")).data;
		const ut = await T.login(T.a, "live-gone", "pw-live-gone-Secret1");
		const s2 = await live(ut);
		await untilLive(s2);
		const t1 = performance.now();
		await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${u.id}`, { status: "INACTIVE" }), "deactivate");
		const err2 = await s2.waitFor((f) => f.event === "error", 2500);
		expect(err2.at - t1).toBeLessThan(2000);
		expect(JSON.parse(err2.data).statusCode).toBe(401);
	});

	test("Last-Event-ID resumes after a position without the matches and without gaps; a position past the retention answers 410", async () => {
		const { member } = T.a;
		const s = await live(member.token);
		await untilLive(s);
		const a1 = await note(member.token, { title: "r1" });
		const f1 = await change(s, a1.id, "enter");
		s.close();
		const a2 = await note(member.token, { title: "r2" });
		await patch(member.token, a1.id, { title: "r1b" });
		const r = await live(member.token, "", { "last-event-id": f1.id! });
		expect(r.status).toBe(200);
		await change(r, a1.id, "update");
		await change(r, a2.id, "enter");
		// No listing and no second `live`: the changes after the position only, in order.
		expect(r.frames.every((f) => f.event === "change")).toBe(true);
		expect(r.changes().map((c) => [c.id, c.op])).toEqual([
			[a2.id, "enter"],
			[a1.id, "update"],
		]);
		// The query parameter form.
		const q = await live(member.token, `&last_event_id=${f1.id}`);
		await change(q, a1.id, "update");

		// A position of this stream at the outbox's first record, sealed as the gateway seals it (the deployment's key,
		// the stream's principal and view). A passed record stays OUTBOX_GRACE_MS (positions count from 1): the first one, passed by every group since the start, goes now.
		const claims = JSON.parse(Buffer.from(member.token.split(".")[1], "base64url").toString("utf8"));
		const first = new Positions(loadKeys(T.p.cfg).aesSecret).of(streamOf(claims, "content.notes", { live: "true" }, {})).seal(1);
		await sharedOutbox(T.p.cfg).prune(1, 168, 0);
		const gone = await live(member.token, "", { "last-event-id": first });
		const e = await gone.waitFor((f) => f.event === "error");
		expect(JSON.parse(e.data)).toEqual({ statusCode: 410, message: "Last-Event-ID is older than this stream's retention; reconnect without it to start over", error: "Gone" });
		await gone.ended;
	});

	test("hostile input: a bad `live` or query is a plain 400/403 before the stream; live cursors count toward the 8 open cursors", async () => {
		const { member, limited } = T.a;
		const bad = await T.as(member.token, "GET", "/content/notes/cursor?live=yes");
		expect(bad.status).toBe(400);
		expect(bad.body).toEqual({ statusCode: 400, message: "live must be true or false", error: "Bad Request" });
		const noGrant = await T.as(await T.login(T.a, limited.username, limited.password), "GET", "/identity/users/cursor?live=true");
		expect(noGrant.status).toBe(403);
		const where = await T.as(member.token, "GET", `/content/notes/cursor?live=true&query=${encodeURIComponent('{"$where":"1"}')}`);
		expect(where.status).toBe(400);
		const noToken = await T.p.http("GET", "/content/notes/cursor?live=true");
		expect(noToken.status).toBe(401);
		const streams = [];
		for (let i = 0; i < 8; i++) streams.push(await live(member.token));
		await Promise.all(streams.map(untilLive));
		const ninth = await T.as(member.token, "GET", "/content/notes/cursor?live=true");
		expect(ninth.status).toBe(429);
		expect(ninth.body).toEqual({ statusCode: 429, message: "too many open cursors", error: "Too Many Requests" });
	});
	test("a burst of changes read as one batch is decided in slices: the event loop turns meanwhile, every frame arrives once, in order", async () => {
		const { member } = T.a;
		const streams = [await live(member.token), await live(member.token), await live(member.token)];
		await Promise.all(streams.map(untilLive));
		// The gateway's feed: each record it decides is made to cost 2 ms of CPU, so the 40 records of one bulk create
		// (one append, one batch) cost 80 ms; the loop must still turn between the first and the last.
		const hub = (T.p.broker.getLocalService("api") as any).liveCursors;
		const dispatch = hub.dispatch;
		const decided: number[] = [];
		hub.dispatch = function (this: unknown, ...args: unknown[]) {
			const until = performance.now() + 2;
			while (performance.now() < until);
			decided.push(performance.now());
			return dispatch.apply(this, args);
		};
		const turns: number[] = [];
		const ticker = setInterval(() => turns.push(performance.now()), 1);
		try {
			const items = Array.from({ length: 40 }, (_, i) => ({ title: `burst ${i}` }));
			const made = (await ok(T.as(member.token, "POST", "/content/notes/bulk", { items }), "bulk")).items.map((d: any) => d.id as string);
			for (const s of streams) await change(s, made[made.length - 1], "enter");
			const first = decided[0];
			const last = decided[decided.length - 1];
			expect(decided.length).toBeGreaterThanOrEqual(40);
			expect(turns.filter((t) => t > first && t < last).length).toBeGreaterThan(0);
			for (const s of streams) {
				const entered = s
					.changes()
					.filter((c) => made.includes(c.id) && c.op === "enter")
					.map((c) => c.id);
				expect(entered).toEqual(made);
			}
		} finally {
			clearInterval(ticker);
			hub.dispatch = dispatch;
		}
	});
});
