/**
 * The watcher (workers/watcher.worker.ts) keeps the caches of every node in sync from the change stream: revocations
 * of sessions and APTs, grant and RBAC changes, users' roles, groups and state, client and CQRS configuration changes.
 */
import { randomBytes } from "crypto";
import type { ServiceSchema } from "moleculer";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { kvOf, sleep, tokenOf } from "../helpers/auth";
import type { OutboxRecord } from "../../events/outbox";
import { blacklistKey } from "../../authority/authenticate";
import { waitForValue } from "../helpers/wait";

describe("watcher", () => {
	let p: TestPlatform;
	let root: string;
	const seen: Array<{ event: string; params: any }> = [];
	const count = (event: string) => seen.filter((s) => s.event === event).length;

	beforeAll(async () => {
		p = await bootPlatform();
		root = await p.rootToken();
		const on = (event: string) => (ctx: { params: unknown }) => void seen.push({ event, params: ctx.params });
		const probe: ServiceSchema = {
			name: `probe${randomBytes(3).toString("hex")}`,
			events: {
				"authority.changed": on("authority.changed"),
				"auth.session.revoked": on("auth.session.revoked"),
				"auth.apt.revoked": on("auth.apt.revoked"),
				"domain.client.changed": on("domain.client.changed"),
				"context.cqrs.changed": on("context.cqrs.changed"),
				"identity.user.changed": on("identity.user.changed"),
			},
		};
		p.broker.createService(probe);
		await p.broker.waitForServices([probe.name]);
	}, 60_000);

	afterAll(async () => {
		await p?.cleanup();
	});

	const rootLogin = () => tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password });
	const watcher = () => p.broker.getLocalService("watcher") as any;
	/** A change record as the stream delivers it. */
	const rec = (event: Partial<OutboxRecord["event"]>): OutboxRecord => ({
		seq: 1,
		event: { id: "aaaaaaaaaaaaaaaaaaaaaaaa", ts_ms: Date.now(), op: "u", topic: "x.y", source: { name: "platform", db: "x", collection: "y" }, ...event },
		clients: [],
		actor: {},
	});

	test("a session deleted through the REST API is blacklisted and revoked: its token stops working", async () => {
		const victim = await rootLogin();
		expect((await p.http("GET", "/auth/verify", { token: victim.access_token })).status).toBe(200);
		const del = await p.http("DELETE", `/identity/sessions/${victim.session}`, { token: root });
		expect(del.status).toBe(200);
		// Nothing on the write path revokes it: the watcher does, from the change event (blacklist, then broadcast).
		// The token may fail earlier: in its first seconds a gateway reads the durable session on every request.
		await waitForValue("the watcher's broadcast", async () => seen.some((s) => s.event === "auth.session.revoked" && s.params.session === victim.session));
		expect(await kvOf(p).get(blacklistKey(victim.session))).toBe("1");
		expect((await p.http("GET", "/auth/verify", { token: victim.access_token })).status).toBe(401);
	});

	test("a deleted APT: its session blacklisted, revocation broadcast again by the watcher", async () => {
		const r = await p.http("POST", "/auth/apts", { token: root, body: { name: "watched" } });
		expect(r.status).toBe(200);
		const before = count("auth.apt.revoked");
		expect((await p.http("DELETE", `/auth/apts/${r.body.data.id}`, { token: root })).status).toBe(200);
		// Once by the auth service on the write path, once by the watcher.
		await waitForValue("the watcher's broadcast", async () => count("auth.apt.revoked") >= before + 2);
		expect((await p.http("GET", "/auth/verify", { token: r.body.data.token })).status).toBe(401);
	});

	test("a stale delete of an APT that is live again (restored since) does not revoke it", async () => {
		const r = await p.http("POST", "/auth/apts", { token: root, body: { name: "restored" } });
		expect(r.status).toBe(200);
		const before = count("auth.session.revoked");
		// The watcher sees the stale delete only now: the APT is live again, so it must not revoke it.
		await watcher().handleChange(rec({ topic: "auth.apts", op: "d", id: r.body.data.id, source: { name: "platform", db: "auth", collection: "apts" } }));
		expect(count("auth.session.revoked")).toBe(before);
		expect((await p.http("GET", "/auth/verify", { token: r.body.data.token })).status).toBe(200);
	});

	test("a client change is broadcast as domain.client.changed", async () => {
		const c = await p.http("POST", "/domain/clients", { token: root, body: { name: "watched client", domains: ["watched.example"] } });
		expect(c.status).toBe(200);
		const id = c.body.data.id;
		await waitForValue("the broadcast", async () => seen.some((s) => s.event === "domain.client.changed" && s.params.id === id && s.params.op === "c"));
		expect((await p.http("PATCH", `/domain/clients/${id}`, { token: root, body: { name: "renamed" } })).status).toBe(200);
		await waitForValue("the broadcast", async () => seen.some((s) => s.event === "domain.client.changed" && s.params.id === id && s.params.op === "u"));
	});

	test("grant and RBAC changes broadcast authority.changed, one per burst", async () => {
		await sleep(300);
		const before = count("authority.changed");
		const grants = rec({ topic: "auth.grants", source: { name: "platform", db: "auth", collection: "grants" } });
		for (let i = 0; i < 20; i++) await watcher().handleChange(grants);
		await sleep(300);
		expect(count("authority.changed") - before).toBe(1);
		const rbac = rec({
			topic: "context.configs",
			op: "c",
			source: { name: "platform", db: "context", collection: "configs" },
			after: { id: "a", key: "RBAC", eid: "e", value: [] },
		});
		await watcher().handleChange(rbac);
		await sleep(300);
		expect(count("authority.changed") - before).toBe(2);
		// Other configs and settings do not touch the grant index.
		await watcher().handleChange(rec({ topic: "context.configs", op: "c", after: { id: "b", key: "APP", eid: "e", value: {} } }));
		await watcher().handleChange(rec({ topic: "context.settings", op: "c", after: { id: "c", key: "RBAC" } }));
		await sleep(300);
		expect(count("authority.changed") - before).toBe(2);
	});

	test("a user's roles, groups, username, state or existence changed → identity.user.changed, by the write path and again by the watcher", async () => {
		const u = await p.http("POST", "/identity/users", {
			token: root,
			body: { username: `watched-${Date.now().toString(36)}`, password: "watched-Secret-1", subjects: ["@editor"] },
		});
		expect(u.status).toBe(200);
		const id = u.body.data.id;
		const heard = () => seen.filter((s) => s.event === "identity.user.changed" && s.params.ids?.[0] === id).length;
		expect((await p.http("PATCH", `/identity/users/${id}`, { token: root, body: { subjects: [] } })).status).toBe(200);
		await waitForValue("both broadcasts", async () => heard() === 2);
		// Other fields do not touch a token: nothing is broadcast for them (neither by the write path nor the watcher).
		expect((await p.http("PATCH", `/identity/users/${id}`, { token: root, body: { tags: ["x"] } })).status).toBe(200);
		const users = { name: "platform", db: "identity", collection: "users" };
		await watcher().handleChange(
			rec({
				topic: "identity.users",
				op: "u",
				id,
				source: users,
				before: { id, subjects: [], status: "ACTIVE", tags: [] },
				after: { id, subjects: [], status: "ACTIVE", tags: ["x"] },
			}),
		);
		await watcher().handleChange(rec({ topic: "identity.users", op: "c", id, source: users, after: { id, subjects: ["@editor"] } }));
		await sleep(300);
		expect(heard()).toBe(2);
		for (const [op, before, after] of [
			["u", { id, subjects: ["@editor"] }, { id, subjects: ["@editor", "team.example"] }],
			["u", { id, status: "ACTIVE" }, { id, status: "INACTIVE" }],
			["u", { id, username: "a-name" }, { id, username: "b-name" }],
			["d", { id }, undefined],
			["r", { id }, { id }],
		] as const) {
			const n = heard();
			await watcher().handleChange(rec({ topic: "identity.users", op, id, source: users, before, after }));
			await waitForValue(`the broadcast of ${op} ${JSON.stringify(after)}`, async () => heard() === n + 1);
			expect(seen.filter((s) => s.event === "identity.user.changed").pop()?.params).toEqual({ ids: [id] });
		}
	});

	test("CQRS configuration changes are broadcast with the client ids concerned", async () => {
		await watcher().handleChange(
			rec({ topic: "context.configs", op: "u", before: { id: "a", key: "CQRS", eid: "c1", value: {} }, after: { id: "a", key: "CQRS", eid: "c2", value: {} } }),
		);
		expect(seen.filter((s) => s.event === "context.cqrs.changed").pop()?.params).toEqual({ eids: ["c1", "c2"] });
	});
});
