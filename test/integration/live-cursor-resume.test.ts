/**
 * Issue 31 findings 1, 2, 3 and 8: what a live cursor sends from a position, and which positions it takes.
 * - A resume (and any catch-up from a past position) carries the stream's own collection only, decided with the
 *   caller's view: the users, grants, configs, APTs, wallets and sessions written meanwhile are in no frame.
 * - It sends each document once, as it is at the end of the catch-up: a state since redacted or destroyed is never
 *   replayed (a document gone since is at most a `leave` without `data`).
 * - A position is bound to its stream (principal, collection, query, zones, projection) and hides the store's
 *   counter: one of another stream, or one made up, answers `event: error` with a 400 body; it stays valid across
 *   the principal's token refresh (an expired one answers 410: live-cursor.test.ts). The listing's frames keep
 *   document ids as their `id`.
 * - A `$regex` query's work budget applies to each evaluation, not to the stream's whole life; one change over it
 *   ends the stream with `event: error` and the 400 body naming the limit.
 * Two tenants, on both document stores.
 */
import { bootTenancy, ok, type Tenancy, type TenantUser } from "../helpers/tenants";
import { changeFrame, liveStreams, type LiveStream } from "../helpers/live-sse";

jest.setTimeout(180_000);

describe("live cursor positions and resume", () => {
	let T: Tenancy;
	/** Tenant a's and b's `limited` user, each with a read grant on content:notes only (no other collection). */
	const reader: Record<"a" | "b", string> = { a: "", b: "" };
	const streams = liveStreams(() => T.p.url);
	const live = streams.live;

	beforeAll(async () => {
		T = await bootTenancy();
		for (const t of [T.a, T.b]) {
			await T.grant(t.admin.token, { subject: t.limited.subject, action: "read", object: "content:notes" });
			reader[t.name as "a" | "b"] = await T.login(t, t.limited.username, t.limited.password);
		}
	});
	afterAll(async () => {
		streams.closeAll();
		await T?.cleanup();
	});
	afterEach(() => streams.closeAll());

	/** The position of a fresh stream's `event: live` frame; the stream is closed. */
	async function positionOf(token: string, qs = "", path?: string): Promise<string> {
		const s = await live(token, qs, {}, path);
		const l = await s.waitFor((f) => f.event === "live");
		s.close();
		return l.id!;
	}
	const note = async (token: string, body: Record<string, unknown>) => (await ok(T.as(token, "POST", "/content/notes", body), "create")).data;
	const patch = (token: string, id: string, body: Record<string, unknown>) => ok(T.as(token, "PATCH", `/content/notes/${id}`, body), "patch");
	const change = changeFrame;
	const get = async (token: string, id: string) => (await ok(T.as(token, "GET", `/content/notes/${id}`), "get")).data;
	/** The first frame of a stream that must end at once with an error, and the stream's end. */
	async function refused(s: LiveStream) {
		expect(s.status).toBe(200);
		const e = await s.waitFor((f) => f.event === "error");
		await s.ended;
		expect(s.frames).toEqual([e]);
		return JSON.parse(e.data);
	}
	const BAD_POSITION = { statusCode: 400, message: "Last-Event-ID is not a position of this stream; reconnect without it to start over", error: "Bad Request" };

	test("a resume carries its own collection only: the users, grants, configs, APTs, wallets and sessions written since are in no frame", async () => {
		const { admin } = T.a;
		const p = await positionOf(reader.a, "&zone=client");
		// Foreign writes of the tenant, each in the client zone of the reader's tenant.
		const user = (
			await ok(
				T.as(admin.token, "POST", "/identity/users", { username: "leaky", email: "leaky@a.example", phone: "+15551230077", password: "pw-leaky-a-Secret1", subjects: [] }),
				"user",
			)
		).data;
		await T.login(T.a, "leaky", "pw-leaky-a-Secret1");
		await T.grant(admin.token, { subject: `${user.id}@${T.a.domain}`, action: "read", object: "content:posts" });
		await ok(
			T.as(admin.token, "POST", "/context/configs", { key: "CQRS", eid: T.a.client.id, value: { webhook: "https://hooks.leaky.example/cqrs", secret: "cqrs-leaky-secret" } }),
			"config",
		);
		await ok(T.as(admin.token, "POST", "/auth/apts", { name: "leaky apt", scopes: ["read:content"] }), "apt");
		const notes = [(await note(admin.token, { title: "client note" })).id];
		// The query parameter, then the header an EventSource sends when it reconnects.
		for (const [qs, headers] of [
			[`&zone=client&last_event_id=${encodeURIComponent(p)}`, {}],
			["&zone=client", { "last-event-id": p }],
		] as const) {
			const r = await live(reader.a, qs, headers);
			expect(r.status).toBe(200);
			await change(r, notes[0], "enter");
			notes.push((await note(admin.token, { title: "marker" })).id);
			await change(r, notes[notes.length - 1], "enter");
			expect(r.changes().map((c) => c.id)).toEqual(notes);
			expect(r.text()).not.toMatch(/leaky|15551230077|wallet|balance|hooks\.|"ip"|agent/);
			r.close();
		}
	});

	test("two tenants: a resume of tenant b's reader sees nothing of tenant a's writes, and positions say nothing of them", async () => {
		const pb = await positionOf(reader.b, "&zone=client");
		const ga = await note(T.a.admin.token, { title: "tenant a note" });
		const gb = await note(T.b.admin.token, { title: "tenant b note" });
		const r = await live(reader.b, `&zone=client&last_event_id=${encodeURIComponent(pb)}`);
		await change(r, gb.id, "enter");
		expect(r.text()).not.toContain(ga.id);
		// Opaque and fixed-length: no counter shared across tenants shows through.
		for (const id of [pb, ...r.changes().map((c) => c.position)]) expect(id).toMatch(/^L[A-Za-z0-9_-]{38}$/);
	});

	test("a resume sends each document once, as it is now: a state redacted or destroyed since is never replayed", async () => {
		const { admin, member } = T.a;
		const p = await positionOf(member.token);
		const salary = await note(admin.token, { title: "pay", content: "director salary 900k", shares: [member.id] });
		await patch(admin.token, salary.id, { content: "[redacted]" });
		const ssn = await note(admin.token, { title: "id", content: "ssn 123-45-6789", shares: [member.id] });
		await ok(T.as(admin.token, "DELETE", `/content/notes/${ssn.id}`), "delete");
		await ok(T.as(admin.token, "DELETE", `/content/notes/${ssn.id}/destroy`), "destroy");
		const edited = await note(admin.token, { title: "draft one", shares: [member.id] });
		await patch(admin.token, edited.id, { title: "draft two" });
		await patch(admin.token, edited.id, { title: "final" });
		const gone = await note(member.token, { title: "mine, soft-deleted" });
		await ok(T.as(member.token, "DELETE", `/content/notes/${gone.id}`), "delete own");

		const r = await live(member.token, "", { "last-event-id": p });
		const marker = await note(member.token, { title: "marker" });
		await change(r, marker.id, "enter");
		const frames = r.changes();
		expect(frames.filter((c) => c.id === salary.id)).toEqual([{ op: "enter", id: salary.id, data: await get(member.token, salary.id), position: expect.any(String) }]);
		expect(frames.filter((c) => c.id === edited.id).map((c) => [c.op, c.data?.title])).toEqual([["enter", "final"]]);
		for (const id of [ssn.id, gone.id]) for (const c of frames.filter((f) => f.id === id)) expect(c).toEqual({ op: "leave", id, position: expect.any(String) });
		expect(r.text()).not.toMatch(/900k|123-45-6789|draft one|draft two|soft-deleted/);
		// One frame per document, in the order of each one's last change.
		expect(frames.map((c) => c.id).filter((id) => id !== ssn.id && id !== gone.id)).toEqual([salary.id, edited.id, marker.id]);
		// A cut in the middle of the catch-up resumes after the last frame received, without a gap or a replay.
		const cut = await live(member.token, "", { "last-event-id": frames[0].position });
		const m2 = await note(member.token, { title: "marker 2" });
		await change(cut, m2.id, "enter");
		const after = cut.changes().map((c) => c.id);
		expect(after).not.toContain(frames[0].id);
		expect(after.filter((id) => id !== ssn.id && id !== gone.id && id !== salary.id)).toEqual([edited.id, marker.id, m2.id]);
	});

	test("a position is bound to its stream: another principal's, collection's, query's or a made-up one answers an error frame with 400", async () => {
		const { member, admin } = T.a;
		const p = await positionOf(member.token);
		const enc = encodeURIComponent(p);
		expect(await refused(await live(T.b.member.token, "", { "last-event-id": p }))).toEqual(BAD_POSITION);
		expect(await refused(await live(admin.token, `&last_event_id=${enc}`))).toEqual(BAD_POSITION);
		expect(await refused(await live(member.token, `&last_event_id=${enc}`, {}, "/content/tickets/cursor"))).toEqual(BAD_POSITION);
		expect(await refused(await live(member.token, `&last_event_id=${enc}&query=${encodeURIComponent('{"title":"x"}')}`))).toEqual(BAD_POSITION);
		expect(await refused(await live(member.token, `&last_event_id=${enc}&zone=own,share,client`))).toEqual(BAD_POSITION);
		expect(await refused(await live(member.token, `&last_event_id=${enc}&projection=${encodeURIComponent('{"title":1}')}`))).toEqual(BAD_POSITION);
		for (const made of ["L1", `L${"A".repeat(38)}`, p.slice(0, -1) + (p.endsWith("A") ? "B" : "A"), "nope"])
			expect(await refused(await live(member.token, "", { "last-event-id": made }))).toEqual(BAD_POSITION);

		// The same view spelled otherwise (key order, spaces, zone order) is the same stream.
		const q1 = encodeURIComponent('{"title":{"$ne":"x"},"content":{"$ne":"y"}}');
		const q2 = encodeURIComponent('{ "content": {"$ne": "y"}, "title": {"$ne": "x"} }');
		const pq = await positionOf(member.token, `&query=${q1}&zone=share,own`);
		const n = await note(member.token, { title: "same view" });
		await change(await live(member.token, `&query=${q2}&zone=own,share&last_event_id=${encodeURIComponent(pq)}`), n.id, "enter");

		// The principal's next token (a new login, another session) resumes from it.
		const p2 = await positionOf(member.token);
		const m = await note(member.token, { title: "after refresh" });
		const fresh = await T.login(T.a, member.username, member.password);
		await change(await live(fresh, "", { "last-event-id": p2 }), m.id, "enter");
	});

	test("the listing's frames keep document ids: one as Last-Event-ID resumes the listing after it, then `event: live`", async () => {
		const { member } = T.a;
		const made = [];
		for (let i = 0; i < 3; i++) made.push(await note(member.token, { title: `listed ${i}`, content: "listing" }));
		const q = `&query=${encodeURIComponent('{"content":"listing"}')}`;
		const s = await live(member.token, q);
		await s.waitFor((f) => f.event === "live");
		const listed = s.frames.filter((f) => !f.event).map((f) => f.id);
		expect(listed).toEqual(made.map((d) => d.id));
		const r = await live(member.token, q, { "last-event-id": made[0].id });
		const l = await r.waitFor((f) => f.event === "live");
		expect(r.frames.slice(0, r.frames.indexOf(l)).map((f) => f.id)).toEqual([made[1].id, made[2].id]);
		expect(l.id).toMatch(/^L[A-Za-z0-9_-]{38}$/);
	});

	describe("a $regex query", () => {
		let regexUser: TenantUser;
		beforeAll(() => {
			regexUser = T.b.member;
		});
		test("spends its work budget per evaluation: every matching change arrives; one change over the budget ends the stream with its 400", async () => {
			const q = `&query=${encodeURIComponent(JSON.stringify({ content: { $regex: "[a-z]{990}q" } }))}`;
			const s = await live(regexUser.token, q);
			await s.waitFor((f) => f.event === "live");
			// Each change costs about 6 000 characters x 993 instructions of the pattern: 15 of them are 90 M work units,
			// more than one evaluation's budget (50 M), each well under it.
			const made = [];
			for (let i = 0; i < 15; i++) made.push((await note(regexUser.token, { title: `r${i}`, content: `${"a".repeat(5999)}q` })).id);
			await change(s, made[14], "enter", 15_000);
			expect(s.changes().map((c) => c.id)).toEqual(made);
			expect(s.frames.some((f) => f.event === "error")).toBe(false);
			await note(regexUser.token, { title: "too long", content: `${"a".repeat(60_000)}q` });
			const e = await s.waitFor((f) => f.event === "error", 15_000);
			expect(JSON.parse(e.data)).toEqual({
				statusCode: 400,
				message: "query is too expensive: its $regex patterns would scan too much text; narrow the query",
				error: "Bad Request",
			});
			await s.ended;
		});
	});
});
