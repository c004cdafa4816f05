/**
 * MQTT hardening (issues 8.7 and 9.5), each with its attack, against the embedded broker and the EMQX-style hooks:
 * - bob connecting with alice's client id and `clean: false` is refused (CONNACK 5): he gets none of her queued
 *   messages, her live connection stays, and the ownership survives a restart;
 * - a CONNECT announcing 250 MB is closed at its fixed header, without buffering what follows;
 * - at most 8 connections per identity.
 */
import net from "net";
import { randomBytes } from "crypto";
import mqtt, { type MqttClient } from "mqtt";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";
import { createUser, tokenOf } from "../helpers/auth";
import { DOMAIN_SPEC_PORTS, freeOpsOffset } from "../helpers/ports";
import { sleep } from "../helpers/wait";
import { WORKER_PORTS } from "../../workers";
import { MQTT_MAX_CONNECTIONS } from "../../workers/preserver.worker";
import { connectHeader } from "../helpers/mqtt-wire";

jest.setTimeout(90_000);

interface User {
	id: string;
	username: string;
	password: string;
	token: string;
}

async function user(p: TestPlatform, root: string, name: string): Promise<User> {
	const username = `${name}-${randomBytes(4).toString("hex")}`;
	const password = `pw-${randomBytes(9).toString("hex")}`;
	const u = await createUser(p.http, root, { username, password });
	expect((await p.http("POST", "/auth/grants", { token: root, body: { subject: `${u.id}@${p.root.domain}`, action: "write", object: "content:notes" } })).status).toBe(200);
	const t = await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password });
	return { id: u.id, username, password, token: t.access_token };
}

const open: MqttClient[] = [];
async function connect(url: string, opts: mqtt.IClientOptions): Promise<{ client: MqttClient; sessionPresent: boolean; messages: string[] }> {
	const client = mqtt.connect(url, { reconnectPeriod: 0, connectTimeout: 5000, ...opts });
	const messages: string[] = [];
	client.on("message", (topic) => messages.push(topic));
	const connack = await new Promise<mqtt.IConnackPacket>((resolve, reject) => {
		client.once("connect", resolve);
		client.once("error", reject);
		client.once("close", () => reject(new Error("closed before CONNACK")));
	});
	open.push(client);
	return { client, sessionPresent: connack.sessionPresent, messages };
}

/** The CONNACK refusal code (5 = not authorized), or throws when the connection was accepted. */
async function refusal(url: string, opts: mqtt.IClientOptions): Promise<number | string> {
	try {
		const c = await connect(url, opts);
		await c.client.endAsync(true);
	} catch (err) {
		return (err as { code?: number }).code ?? (err as Error).message;
	}
	throw new Error("the connection was accepted");
}

function closedWithin(client: MqttClient, ms: number): Promise<boolean> {
	if (!client.connected) return Promise.resolve(true);
	return new Promise((resolve) => {
		const t = setTimeout(() => resolve(false), ms);
		client.once("close", () => (clearTimeout(t), resolve(true)));
	});
}

describe("MQTT hardening", () => {
	let p: TestPlatform;
	let url: string;
	let hooks: string;
	let root: string;
	let alice: User;
	let bob: User;
	const brokerUrl = async () => ((await p.broker.call("preserver.brokerUrl")) as { url: string }).url;

	beforeAll(async () => {
		const offset = await freeOpsOffset([...DOMAIN_SPEC_PORTS, ...Object.values(WORKER_PORTS)]);
		p = await bootPlatform({ mqttUrl: undefined, mqttPort: 0, mqttTopicRoot: "platform", servicePorts: true, opsPortOffset: offset });
		url = await brokerUrl();
		hooks = `http://127.0.0.1:${WORKER_PORTS.preserver + offset}`;
		root = await p.rootToken();
		alice = await user(p, root, "alice");
		bob = await user(p, root, "bob");
	}, 90_000);

	afterAll(async () => {
		for (const c of open) await c.endAsync(true).catch(() => undefined);
		await p?.cleanup();
	});

	describe("client ids belong to the identity that first used them (issue 8.7)", () => {
		test("bob with alice's client id and clean: false is refused and gets none of her queued messages", async () => {
			const clientId = `alice-phone-${randomBytes(4).toString("hex")}`;
			const a = await connect(url, { clientId, clean: false, username: alice.id, password: alice.token });
			await a.client.subscribeAsync(`platform/owner/${alice.id}/content/notes/#`, { qos: 1 });
			await a.client.endAsync();
			// Queued for alice while she is away.
			const note = await p.http("POST", "/content/notes", { token: alice.token, body: { title: "private", content: "for alice only" } });
			expect(note.status).toBe(200);
			await sleep(500);
			// The attack: bob takes her client id with a persistent session.
			expect(await refusal(url, { clientId, clean: false, username: bob.id, password: bob.token })).toBe(5);
			// Alice's session is intact: she gets it back with her message.
			const back = await connect(url, { clientId, clean: false, username: alice.id, password: alice.token });
			expect(back.sessionPresent).toBe(true);
			for (let i = 0; i < 50 && !back.messages.length; i++) await sleep(100);
			expect(back.messages).toEqual([`platform/owner/${alice.id}/content/notes/${note.body.data.id}`]);
		});

		test("the owner's live connection is not dropped by another identity using its client id", async () => {
			const clientId = `alice-live-${randomBytes(4).toString("hex")}`;
			const a = await connect(url, { clientId, username: alice.id, password: alice.token });
			expect(await refusal(url, { clientId, username: bob.id, password: bob.token })).toBe(5);
			expect(await closedWithin(a.client, 1000)).toBe(false);
			expect(a.client.connected).toBe(true);
			// Alice herself may reconnect with it (she replaces her own session, as MQTT says).
			const again = await connect(url, { clientId, username: alice.id, password: alice.token });
			expect(again.client.connected).toBe(true);
		});

		test("the ownership is durable: still refused to bob after a restart of the platform", async () => {
			const clientId = `alice-durable-${randomBytes(4).toString("hex")}`;
			const a = await connect(url, { clientId, username: alice.id, password: alice.token });
			await a.client.endAsync();
			for (const c of open.splice(0)) await c.endAsync(true).catch(() => undefined);
			await p.restart();
			url = await brokerUrl();
			expect(await refusal(url, { clientId, username: bob.id, password: bob.token })).toBe(5);
			const back = await connect(url, { clientId, username: alice.id, password: alice.token });
			expect(back.client.connected).toBe(true);
		});

		test("hooks: another identity's client id is denied, and the owner's ACL answers stay allow", async () => {
			const post = async (path: string, body: unknown) =>
				(await (await fetch(hooks + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })).json()) as any;
			const clientid = `hook-alice-${randomBytes(4).toString("hex")}`;
			const topic = `platform/owner/${alice.id}/content/notes/#`;
			expect((await post("/mqtt/auth", { clientid, username: alice.id, password: alice.token })).result).toBe("allow");
			expect((await post("/mqtt/auth", { clientid, username: bob.id, password: bob.token })).result).toBe("deny");
			expect((await post("/mqtt/acl", { clientid, username: alice.id, topic, action: "subscribe" })).result).toBe("allow");
			expect((await post("/mqtt/acl", { clientid, username: bob.id, topic: `platform/owner/${bob.id}/content/notes/#`, action: "subscribe" })).result).toBe("deny");
			// The embedded broker and the hooks share the ownership.
			expect(await refusal(url, { clientId: clientid, username: bob.id, password: bob.token })).toBe(5);
		});
	});

	describe("limits (issue 9.5)", () => {
		withStatusProbe(() => p.url);
		test("a CONNECT announcing 250 MB is closed at its fixed header; streaming into it buffers nothing", async () => {
			const [host, port] = new URL(url).host.split(":");
			const socket = net.connect({ host, port: Number(port) });
			await new Promise<void>((resolve, reject) => (socket.once("connect", resolve), socket.once("error", reject)));
			let closedAt = 0;
			socket.on("error", () => undefined);
			socket.once("close", () => (closedAt = Date.now()));
			global.gc?.();
			const before = process.memoryUsage();
			// Fixed header: CONNECT (0x10), remaining length 250 MB as a variable byte integer.
			const start = Date.now();
			socket.write(connectHeader(250 * 1024 * 1024));
			const chunk = Buffer.alloc(64 * 1024, 0x41);
			let sent = 0;
			// 20 MB streamed behind the header (or until the broker closed the socket).
			while (sent < 20 * 1024 * 1024 && !closedAt && !socket.destroyed) {
				if (!socket.write(chunk)) await new Promise<void>((r) => (socket.once("drain", r), socket.once("close", r)));
				// The attacker runs in this process: it lets the loop turn between chunks, so that the /status probe
				// measures the broker's work, not this loop's.
				else await new Promise((r) => setImmediate(r));
				sent += chunk.length;
			}
			for (let i = 0; i < 40 && !closedAt; i++) await sleep(50);
			expect(closedAt).toBeGreaterThan(0);
			expect(closedAt - start).toBeLessThan(2000);
			await sleep(200);
			global.gc?.();
			const after = process.memoryUsage();
			expect((after.rss - before.rss) / 2 ** 20).toBeLessThan(50);
			expect((after.heapUsed + after.arrayBuffers - before.heapUsed - before.arrayBuffers) / 2 ** 20).toBeLessThan(50);
			socket.destroy();
			// The broker still serves everyone else.
			const ok = await connect(url, { clientId: `after-${randomBytes(4).toString("hex")}`, username: alice.id, password: alice.token });
			expect(ok.client.connected).toBe(true);
		});

		test(`at most ${MQTT_MAX_CONNECTIONS} connections per identity: the 9th is refused, a freed slot is usable`, async () => {
			const carol = await user(p, root, "carol");
			const conns = [];
			for (let i = 0; i < MQTT_MAX_CONNECTIONS; i++)
				conns.push(await connect(url, { clientId: `carol-${i}-${randomBytes(3).toString("hex")}`, username: carol.id, password: carol.token }));
			expect(await refusal(url, { clientId: `carol-9-${randomBytes(3).toString("hex")}`, username: carol.id, password: carol.token })).toBe(5);
			// Other identities are not affected.
			const other = await connect(url, { clientId: `bob-${randomBytes(3).toString("hex")}`, username: bob.id, password: bob.token });
			expect(other.client.connected).toBe(true);
			// Reconnecting with one of its own ids replaces that connection: still allowed.
			const same = await connect(url, { clientId: conns[0].client.options.clientId, username: carol.id, password: carol.token });
			expect(same.client.connected).toBe(true);
			await conns[1].client.endAsync();
			await sleep(200);
			const freed = await connect(url, { clientId: `carol-10-${randomBytes(3).toString("hex")}`, username: carol.id, password: carol.token });
			expect(freed.client.connected).toBe(true);
		});
	});
});
