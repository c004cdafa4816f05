/**
 * MQTT (docs/mqtt.md): the embedded broker with token logins and per-topic rules, the preserver's EMQX-style HTTP
 * hooks, and the publisher against a real Mosquitto (skipped with a message when it is down; REQUIRE_SERVERS=1
 * makes that a failure).
 */
import { randomBytes } from "crypto";
import mqtt, { type MqttClient } from "mqtt";
import { bootPlatform, needServers, type TestPlatform } from "../helpers/platform";
import { createUser, keysOf, sleep, tokenOf } from "../helpers/auth";
import { DOMAIN_SPEC_PORTS, freeOpsOffset } from "../helpers/ports";
import { WORKER_PORTS } from "../../workers";
import { PUBLISHER_USERNAME, publisherPassword } from "../../lib/mqtt";
import { walletIdOf } from "../../services/financial.service";
import { drained } from "../helpers/stream";

/** Mosquitto, for the block that needs it: decided when the file loads, so jest reports its tests as skipped without it. */
const servers = needServers(["Mosquitto", 1883]);

const MOSQUITTO = "mqtt://127.0.0.1:1883";

interface Message {
	topic: string;
	body: any;
}

interface Sub {
	client: MqttClient;
	messages: Message[];
	/** Resolves with the first message (already received or to come) on that topic. */
	next(topic: string, ms?: number): Promise<Message>;
	close(): Promise<void>;
}

/** An MQTT client that records every message it receives. */
async function connect(url: string, opts: mqtt.IClientOptions = {}): Promise<Sub> {
	const client = await mqtt.connectAsync(url, { reconnectPeriod: 0, connectTimeout: 5000, clientId: `test-${randomBytes(6).toString("hex")}`, ...opts }, false);
	const messages: Message[] = [];
	const waiters: Array<{ topic: string; resolve: (m: Message) => void }> = [];
	client.on("message", (topic, payload) => {
		let body: any = payload.toString("utf8");
		try {
			body = JSON.parse(body);
		} catch {
			/* not JSON */
		}
		const m = { topic, body };
		messages.push(m);
		for (const w of waiters.splice(0))
			if (w.topic === topic) w.resolve(m);
			else waiters.push(w);
	});
	return {
		client,
		messages,
		next(topic, ms = 10_000) {
			const seen = messages.find((m) => m.topic === topic);
			if (seen) return Promise.resolve(seen);
			return new Promise((resolve, reject) => {
				const t = setTimeout(() => reject(new Error(`no message on ${topic} within ${ms} ms (got: ${messages.map((m) => m.topic).join(", ") || "none"})`)), ms);
				waiters.push({ topic, resolve: (m) => (clearTimeout(t), resolve(m)) });
			});
		},
		async close() {
			await client.endAsync(true).catch(() => undefined);
		},
	};
}

/** Connection refused: resolves with the error (a CONNACK refusal or a closed socket). */
async function refused(url: string, opts: mqtt.IClientOptions): Promise<Error> {
	try {
		const s = await connect(url, opts);
		await s.close();
	} catch (err) {
		return err as Error;
	}
	throw new Error("the connection was accepted");
}

/** Resolves true when the client is closed by the broker within `ms`. */
function closedWithin(client: MqttClient, ms: number): Promise<boolean> {
	if (!client.connected) return Promise.resolve(true);
	return new Promise((resolve) => {
		const t = setTimeout(() => resolve(false), ms);
		client.once("close", () => {
			clearTimeout(t);
			resolve(true);
		});
	});
}

/** The granted QoS, or 128 when the broker refused the subscription. */
async function subscribe(s: Sub, filter: string): Promise<number> {
	try {
		const granted = await s.client.subscribeAsync(filter, { qos: 1 });
		return granted[0].qos;
	} catch (err) {
		// mqtt.js rejects a SUBACK whose return code is 128 (failure).
		const granted = (err as { packet?: { granted?: Array<number | { qos: number }> } }).packet?.granted;
		if (granted?.length) return typeof granted[0] === "number" ? granted[0] : granted[0].qos;
		throw err;
	}
}

interface User {
	id: string;
	username: string;
	password: string;
	token: string;
	session: string;
}

async function userWithNotes(p: TestPlatform, root: string, name: string): Promise<User> {
	const username = `${name}-${randomBytes(4).toString("hex")}`;
	const password = `pw-${randomBytes(9).toString("hex")}`;
	const u = await createUser(p.http, root, { username, password });
	const g = await p.http("POST", "/auth/grants", { token: root, body: { subject: `${u.id}@${p.root.domain}`, action: "write", object: "content:notes" } });
	expect(g.status).toBe(200);
	const t = await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password });
	return { id: u.id, username, password, token: t.access_token, session: t.session ?? "" };
}

async function login(p: TestPlatform, u: User): Promise<{ token: string }> {
	const t = await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username: u.username, password: u.password });
	return { token: t.access_token };
}

async function createNote(p: TestPlatform, token: string, title = "hello"): Promise<string> {
	const r = await p.http("POST", "/content/notes", { token, body: { title, content: "mqtt test" } });
	if (r.status !== 200) throw new Error(`note creation failed: ${r.status} ${r.text}`);
	return r.body.data.id;
}

describe("embedded broker and preserver hooks", () => {
	let p: TestPlatform;
	let url: string;
	let hooks: string;
	let root: string;
	let a: User;
	let b: User;
	const open: Sub[] = [];
	const track = (s: Sub) => (open.push(s), s);

	beforeAll(async () => {
		const offset = await freeOpsOffset([...DOMAIN_SPEC_PORTS, ...Object.values(WORKER_PORTS)]);
		// The hooks live on the preserver's own port: ops ports on, shifted to a free range.
		p = await bootPlatform({ mqttUrl: undefined, mqttPort: 0, mqttTopicRoot: "platform", servicePorts: true, opsPortOffset: offset });
		url = ((await p.broker.call("preserver.brokerUrl")) as { url: string }).url;
		hooks = `http://127.0.0.1:${WORKER_PORTS.preserver + offset}`;
		root = await p.rootToken();
		a = await userWithNotes(p, root, "alice");
		b = await userWithNotes(p, root, "bob");
	}, 60_000);

	afterAll(async () => {
		for (const s of open) await s.close();
		await p?.cleanup();
	});

	test("the embedded broker listens on a free port, never the standard 1883", () => {
		expect(url).toMatch(/^mqtt:\/\/127\.0\.0\.1:\d+$/);
		expect(new URL(url).port).not.toBe("1883");
	});

	test("until a token holder has connected, the publisher sends nothing to the embedded broker (nobody could receive it)", async () => {
		const aedes = (p.broker.getLocalService("preserver") as any).aedes;
		const sent: string[] = [];
		const onPublish = (packet: { topic: string }) => packet.topic.startsWith("platform/") && sent.push(packet.topic);
		aedes.on("publish", onPublish);
		try {
			await createNote(p, a.token, "unheard");
			await drained(p.cfg);
			expect(sent).toEqual([]);
			// Once a token holder is admitted, its subscriptions (and those of its offline session) may match: sent again.
			const s = track(await connect(url, { username: b.id, password: b.token }));
			expect(await subscribe(s, `platform/owner/${b.id}/content/notes/#`)).toBe(1);
			const other = await createNote(p, a.token, "heard");
			await drained(p.cfg);
			expect(sent).toEqual(expect.arrayContaining([`platform/owner/${a.id}/content/notes/${other}`, `platform/client/${p.root.client_id}/content/notes/${other}`]));
		} finally {
			aedes.off("publish", onPublish);
		}
	});

	test("a subscriber with username = uid and password = its JWT receives the note it creates on its owner topic", async () => {
		const s = track(await connect(url, { username: a.id, password: a.token }));
		expect(await subscribe(s, `platform/owner/${a.id}/content/notes/#`)).toBe(1);
		const id = await createNote(p, a.token, "mine");
		const m = await s.next(`platform/owner/${a.id}/content/notes/${id}`);
		expect(m.body).toMatchObject({ id, op: "c", topic: "content.notes", source: { name: "platform", db: "content", collection: "notes" } });
		expect(m.body.after).toMatchObject({ id, owner: a.id, title: "mine" });
		expect(m.body.before).toBeUndefined();
	});

	test("another user's owner topic is refused and delivers nothing", async () => {
		const mine = track(await connect(url, { username: a.id, password: a.token }));
		expect(await subscribe(mine, `platform/owner/${a.id}/content/notes/+`)).toBe(1);
		const spy = track(await connect(url, { username: b.id, password: b.token }));
		expect(await subscribe(spy, `platform/owner/${a.id}/content/notes/#`)).toBe(128);
		expect(await subscribe(spy, `platform/owner/+/content/notes/#`)).toBe(128);
		expect(await subscribe(spy, `platform/#`)).toBe(128);
		expect(await subscribe(spy, `#`)).toBe(128);
		// Client topics: only the token's own client (both users log in through the root client, which may be subscribed).
		expect(await subscribe(spy, `platform/client/ffffffffffffffffffffffff/content/notes/#`)).toBe(128);
		expect(await subscribe(spy, `$share/g/platform/owner/${a.id}/content/notes/#`)).toBe(128);
		const id = await createNote(p, a.token, "private");
		await mine.next(`platform/owner/${a.id}/content/notes/${id}`);
		await sleep(300);
		expect(spy.messages).toEqual([]);
	});

	test("a document shared with a user reaches that user's share topic", async () => {
		const s = track(await connect(url, { username: b.id, password: b.token }));
		expect(await subscribe(s, `platform/share/${b.id}/content/notes/#`)).toBe(1);
		const r = await p.http("POST", "/content/notes", { token: a.token, body: { title: "for bob", content: "shared", shares: [b.id] } });
		expect(r.status).toBe(200);
		const m = await s.next(`platform/share/${b.id}/content/notes/${r.body.data.id}`);
		expect(m.body.after).toMatchObject({ owner: a.id, shares: [b.id], title: "for bob" });
	});

	test("collections the token may not read unrestricted are refused, also through wildcards", async () => {
		const s = track(await connect(url, { username: a.id, password: a.token }));
		expect(await subscribe(s, `platform/owner/${a.id}/content/posts/#`)).toBe(128);
		expect(await subscribe(s, `platform/owner/${a.id}/content/+/#`)).toBe(128);
		expect(await subscribe(s, `platform/owner/${a.id}/#`)).toBe(128);
		// A row-restricted grant is for the REST API only.
		const g = await p.http("POST", "/auth/grants", {
			token: root,
			body: { subject: `${a.id}@${p.root.domain}`, action: "read", object: "content:tickets", filter: ['{"owner":"{{token.uid}}"}'] },
		});
		expect(g.status).toBe(200);
		await sleep(100);
		expect(await subscribe(s, `platform/owner/${a.id}/content/tickets/#`)).toBe(128);
		// Own client topics of a readable collection are fine.
		expect(await subscribe(s, `platform/client/${p.root.client_id}/content/notes/#`)).toBe(1);
		expect(await subscribe(s, `platform/share/${a.id}/content/notes/#`)).toBe(1);
	});

	test("a token that may read everything may use wildcards over its own topics", async () => {
		const rootId = p.root.user_id;
		const s = track(await connect(url, { username: rootId, password: root }));
		expect(await subscribe(s, `platform/owner/${rootId}/#`)).toBe(1);
		const id = await createNote(p, root, "root's");
		const m = await s.next(`platform/owner/${rootId}/content/notes/${id}`);
		expect(m.body.after.owner).toBe(rootId);
	});

	test("a bad password, a foreign username and a missing password are refused", async () => {
		await refused(url, { username: a.id, password: "not-a-token" });
		await refused(url, { username: a.id, password: `${a.token.slice(0, -4)}AAAA` });
		await refused(url, { username: b.id, password: a.token });
		await refused(url, { username: a.id });
		await refused(url, {});
		await refused(url, { username: PUBLISHER_USERNAME, password: "guess" });
	});

	test("a logged-out token is refused, and its open connection is closed", async () => {
		const { token } = await login(p, a);
		const s = track(await connect(url, { username: a.id, password: token }));
		expect(await subscribe(s, `platform/owner/${a.id}/content/notes/#`)).toBe(1);
		const out = await p.http("GET", "/auth/logout", { token });
		expect(out.status).toBe(200);
		expect(await closedWithin(s.client, 5000)).toBe(true);
		await refused(url, { username: a.id, password: token });
	});

	test("an APT logs in like a JWT and stops working when deleted", async () => {
		const g = await p.http("POST", "/auth/grants", { token: root, body: { subject: `${a.id}@${p.root.domain}`, action: "manage", object: "auth:apts" } });
		expect(g.status).toBe(200);
		const r = await p.http("POST", "/auth/apts", { token: a.token, body: { name: "mqtt device" } });
		expect(r.status).toBe(200);
		const apt = r.body.data.token as string;
		const s = track(await connect(url, { username: a.id, password: apt }));
		expect(await subscribe(s, `platform/owner/${a.id}/content/notes/#`)).toBe(1);
		const id = await createNote(p, a.token, "for the device");
		await s.next(`platform/owner/${a.id}/content/notes/${id}`);
		const del = await p.http("DELETE", `/auth/apts/${r.body.data.id}`, { token: a.token });
		expect(del.status).toBe(200);
		expect(await closedWithin(s.client, 5000)).toBe(true);
		await refused(url, { username: a.id, password: apt });
	});

	test("token holders cannot publish, not even on their own topics", async () => {
		const watcher = track(await connect(url, { username: a.id, password: a.token }));
		expect(await subscribe(watcher, `platform/owner/${a.id}/content/notes/#`)).toBe(1);
		const forger = track(await connect(url, { username: a.id, password: a.token }));
		forger.client.publish(`platform/owner/${a.id}/content/notes/ffffffffffffffffffffffff`, JSON.stringify({ op: "c" }), { qos: 1 });
		expect(await closedWithin(forger.client, 5000)).toBe(true);
		await sleep(200);
		expect(watcher.messages.filter((m) => m.topic.endsWith("/ffffffffffffffffffffffff"))).toEqual([]);
	});

	describe("EMQX-style HTTP hooks", () => {
		const post = async (path: string, body: unknown, type = "application/json") => {
			const res = await fetch(hooks + path, { method: "POST", headers: { "content-type": type }, body: typeof body === "string" ? body : JSON.stringify(body) });
			return { status: res.status, body: (await res.json().catch(() => null)) as any };
		};
		const clientid = () => `hook-${randomBytes(6).toString("hex")}`;

		test("auth: allow for username = identity and a valid JWT or the publisher's secret, deny otherwise", async () => {
			expect(await post("/mqtt/auth", { clientid: clientid(), username: a.id, password: a.token })).toEqual({ status: 200, body: { result: "allow", is_superuser: false } });
			expect((await post("/mqtt/auth", { clientid: clientid(), username: a.id, password: "nope" })).body.result).toBe("deny");
			expect((await post("/mqtt/auth", { clientid: clientid(), username: b.id, password: a.token })).body.result).toBe("deny");
			expect((await post("/mqtt/auth", { clientid: clientid(), username: a.id })).body.result).toBe("deny");
			expect((await post("/mqtt/auth", { username: a.id, password: a.token })).body.result).toBe("deny");
			expect((await post("/mqtt/auth", "{not json")).body.result).toBe("deny");
			const secret = publisherPassword(keysOf(p).jwtSecret);
			expect((await post("/mqtt/auth", { clientid: clientid(), username: PUBLISHER_USERNAME, password: secret })).body.result).toBe("allow");
			expect((await post("/mqtt/auth", { clientid: clientid(), username: PUBLISHER_USERNAME, password: `${secret}x` })).body.result).toBe("deny");
			// Form bodies are read too.
			const form = new URLSearchParams({ clientid: clientid(), username: a.id, password: a.token }).toString();
			expect((await post("/mqtt/auth", form, "application/x-www-form-urlencoded")).body.result).toBe("allow");
		});

		test("acl: own topics of readable collections only; publishing only for the publisher", async () => {
			const cid = clientid();
			expect((await post("/mqtt/auth", { clientid: cid, username: a.id, password: a.token })).body.result).toBe("allow");
			const acl = async (topic: string, action: string, username = a.id, id = cid) => (await post("/mqtt/acl", { clientid: id, username, topic, action })).body.result;
			expect(await acl(`platform/owner/${a.id}/content/notes/#`, "subscribe")).toBe("allow");
			expect(await acl(`platform/client/${p.root.client_id}/content/notes/+`, "subscribe")).toBe("allow");
			expect(await acl(`platform/owner/${b.id}/content/notes/#`, "subscribe")).toBe("deny");
			expect(await acl(`platform/owner/${a.id}/content/posts/#`, "subscribe")).toBe("deny");
			expect(await acl(`platform/#`, "subscribe")).toBe("deny");
			expect(await acl(`platform/owner/${a.id}/content/notes/x`, "publish")).toBe("deny");
			expect(await acl(`elsewhere/topic`, "publish")).toBe("deny");
			expect(await acl(`platform/owner/${a.id}/content/notes/#`, "all")).toBe("deny");
			// The username must be the one that logged in with that client id; unknown client ids are denied.
			expect(await acl(`platform/owner/${a.id}/content/notes/#`, "subscribe", b.id)).toBe("deny");
			expect(await acl(`platform/owner/${a.id}/content/notes/#`, "subscribe", a.id, clientid())).toBe("deny");

			const pub = clientid();
			const secret = publisherPassword(keysOf(p).jwtSecret);
			expect((await post("/mqtt/auth", { clientid: pub, username: PUBLISHER_USERNAME, password: secret })).body.result).toBe("allow");
			expect(await acl(`platform/owner/${a.id}/content/notes/abc`, "publish", PUBLISHER_USERNAME, pub)).toBe("allow");
			expect(await acl(`other/owner/${a.id}/content/notes/abc`, "publish", PUBLISHER_USERNAME, pub)).toBe("deny");
			expect(await acl(`platform/owner/${a.id}/content/notes/#`, "subscribe", PUBLISHER_USERNAME, pub)).toBe("deny");
		});

		test("a logout turns the ACL answers of that token to deny, and later logins are refused", async () => {
			const { token } = await login(p, b);
			const cid = clientid();
			expect((await post("/mqtt/auth", { clientid: cid, username: b.id, password: token })).body.result).toBe("allow");
			const topic = `platform/owner/${b.id}/content/notes/#`;
			expect((await post("/mqtt/acl", { clientid: cid, username: b.id, topic, action: "subscribe" })).body.result).toBe("allow");
			expect((await p.http("GET", "/auth/logout", { token })).status).toBe(200);
			expect((await post("/mqtt/acl", { clientid: cid, username: b.id, topic, action: "subscribe" })).body.result).toBe("deny");
			expect((await post("/mqtt/auth", { clientid: clientid(), username: b.id, password: token })).body.result).toBe("deny");
		});

		test("connected and disconnected are recorded; disconnected forgets the login", async () => {
			const cid = clientid();
			expect((await post("/mqtt/auth", { clientid: cid, username: a.id, password: a.token })).body.result).toBe("allow");
			expect(await post("/mqtt/connected", { clientid: cid, username: a.id, peerhost: "10.1.2.3" })).toEqual({ status: 200, body: { result: "ok" } });
			let list = (await p.broker.call("preserver.clients")) as Array<{ clientid: string; username: string; via: string; peerhost?: string }>;
			expect(list.find((c) => c.clientid === cid)).toMatchObject({ username: a.id, via: "hooks", peerhost: "10.1.2.3" });
			expect(await post("/mqtt/disconnected", { clientid: cid, username: a.id, reason: "normal" })).toEqual({ status: 200, body: { result: "ok" } });
			list = (await p.broker.call("preserver.clients")) as typeof list;
			expect(list.find((c) => c.clientid === cid)).toBeUndefined();
			expect((await post("/mqtt/acl", { clientid: cid, username: a.id, topic: `platform/owner/${a.id}/content/notes/#`, action: "subscribe" })).body.result).toBe("deny");
			// Embedded connections are listed too (the publisher's own, at least).
			expect(list.some((c) => c.via === "embedded" && c.username === PUBLISHER_USERNAME)).toBe(true);
		});

		test("only POST; /status and /metrics still served beside the hooks", async () => {
			const g = await fetch(`${hooks}/mqtt/auth`);
			expect(g.status).toBe(405);
			expect((await fetch(`${hooks}/status`)).status).toBe(200);
			const m = await fetch(`${hooks}/metrics`);
			expect(m.status).toBe(200);
			expect(await m.text()).toMatch(/preserver_mqtt_auth_total/);
			expect((await fetch(`${hooks}/mqtt/other`, { method: "POST" })).status).toBe(404);
		});
	});
});

servers.describe("publisher with Mosquitto (MQTT_URL)", () => {
	let up = false;
	let p: TestPlatform;
	// A topic root of our own: parallel runs (and anything else on this broker) never meet.
	const topicRoot = `test-${randomBytes(5).toString("hex")}`;
	let sub: Sub;

	beforeAll(async () => {
		up = servers.up;
		if (!up) return;
		p = await bootPlatform({ mqttUrl: MOSQUITTO, mqttTopicRoot: topicRoot });
		sub = await connect(MOSQUITTO);
		await sub.client.subscribeAsync(`${topicRoot}/#`, { qos: 1 });
	}, 60_000);

	afterAll(async () => {
		await sub?.close();
		await p?.cleanup();
	});

	test("a created document arrives on its owner and client topics, QoS 1, as the change event", async () => {
		const token = await p.rootToken();
		const id = await createNote(p, token, "via mosquitto");
		const owner = await sub.next(`${topicRoot}/owner/${p.root.user_id}/content/notes/${id}`);
		expect(owner.body).toMatchObject({ id, op: "c", topic: "content.notes", after: { id, title: "via mosquitto", owner: p.root.user_id } });
		const client = await sub.next(`${topicRoot}/client/${p.root.client_id}/content/notes/${id}`);
		expect(client.body).toEqual(owner.body);
		// Updates and deletes follow, in order.
		expect((await p.http("PATCH", `/content/notes/${id}`, { token, body: { title: "changed" } })).status).toBe(200);
		expect((await p.http("DELETE", `/content/notes/${id}`, { token })).status).toBe(200);
		const topic = `${topicRoot}/owner/${p.root.user_id}/content/notes/${id}`;
		for (let i = 0; i < 50 && sub.messages.filter((m) => m.topic === topic).length < 3; i++) await sleep(100);
		const ops = sub.messages.filter((m) => m.topic === topic).map((m) => m.body.op);
		expect(ops).toEqual(["c", "u", "d"]);
		const del = sub.messages.filter((m) => m.topic === topic)[2].body;
		expect(del.after).toBeUndefined();
		expect(del.before.title).toBe("changed");
	});

	test("shares get their own topic; payloads never carry secrets", async () => {
		const token = await p.rootToken();
		const password = `pw-${randomBytes(9).toString("hex")}`;
		const user = await createUser(p.http, token, { username: `mq-${randomBytes(4).toString("hex")}`, password });
		const created = await sub.next(`${topicRoot}/owner/${p.root.user_id}/identity/users/${user.id}`);
		expect(created.body.after.username).toBe(user.username);
		expect(JSON.stringify(created.body)).not.toContain(password);
		expect(JSON.stringify(created.body)).not.toMatch(/\$2[aby]?\$\d\d\$/);
		expect(created.body.after.password).toBeUndefined();
		const r = await p.http("POST", "/content/notes", { token, body: { title: "shared", content: "for the user", shares: [user.id] } });
		expect(r.status).toBe(200);
		const shared = await sub.next(`${topicRoot}/share/${user.id}/content/notes/${r.body.data.id}`);
		expect(shared.body.after.shares).toEqual([user.id]);
		// The wallet the financial service made for the new user goes to the user's own owner topic.
		const wallet = await sub.next(`${topicRoot}/owner/${user.id}/financial/wallets/${walletIdOf(user.id)}`);
		expect(wallet.body.after).toMatchObject({ user: user.id, currency: "USD", balance: 0, owner: user.id });
	});

	test("with MQTT_URL the preserver runs no embedded broker", async () => {
		expect(await p.broker.call("preserver.brokerUrl")).toBeNull();
		const h = (await p.broker.call("publisher.health")) as { info: Record<string, { status: string }> };
		expect(h.info["mqtt broker"].status).toBe("up");
	});
});
