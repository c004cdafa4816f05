/**
 * MQTT over WebSocket on the gateway's port (`/mqtt`, subprotocol `mqtt`; docs/realtime.md, docs/mqtt.md): the
 * same broker, login, client-id ownership, ACL and limits as MQTT over TCP, refusals of other paths and
 * subprotocols in the error envelope, the browser's address (not the gateway's) counted by the broker, and a gateway
 * without a broker answering 503. The platform trusts X-Forwarded-For here so one test can play several browsers.
 */
import { randomBytes } from "crypto";
import http from "http";
import net from "net";
import mqtt, { type MqttClient } from "mqtt";
import WebSocket from "ws";
import { bootTenancy, type Tenancy } from "../helpers/tenants";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { connectHeader } from "../helpers/mqtt-wire";
import { subscribe } from "../helpers/mqtt-client";
import { keysOf, sleep } from "../helpers/auth";
import { bridgePassword, bridgePreamble, MQTT_PREAUTH } from "../../lib/mqtt";
import { MQTT_MAX_CONNECTIONS } from "../../workers/preserver.worker";
import { MQTT_WS_MAX_MESSAGE, MQTT_WS_MESSAGES } from "../../services/api/mqtt-ws";

jest.setTimeout(120_000);

const ENVELOPE = (statusCode: number, message: string, error: string) => ({ statusCode, message, error });

/** The answer to a raw upgrade request: 101 and its subprotocol, or the refusal's status, headers and JSON body. */
function upgrade(base: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body?: any; headers: http.IncomingHttpHeaders }> {
	return new Promise((resolve, reject) => {
		const req = http.request(base + path, {
			headers: { connection: "Upgrade", upgrade: "websocket", "sec-websocket-version": "13", "sec-websocket-key": randomBytes(16).toString("base64"), ...headers },
		});
		req.on("upgrade", (res, socket) => {
			socket.destroy();
			resolve({ status: res.statusCode!, headers: res.headers });
		});
		req.on("response", (res) => {
			let text = "";
			res.on("data", (c) => (text += c));
			res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: JSON.parse(text) }));
		});
		req.on("error", reject);
		req.end();
	});
}

/** The code of a refused MQTT connection (CONNACK return code), or "closed" when the connection closed without one. */
async function refusal(url: string, opts: mqtt.IClientOptions): Promise<number | string> {
	try {
		const c = await mqtt.connectAsync(url, { reconnectPeriod: 0, connectTimeout: 5000, clientId: `ws-${randomBytes(6).toString("hex")}`, ...opts }, false);
		await c.endAsync(true);
	} catch (err) {
		return (err as { code?: number }).code ?? "closed";
	}
	throw new Error("the connection was accepted");
}

/** Resolves true when the client is closed within `ms`. */
function closedWithin(client: MqttClient | WebSocket, ms: number): Promise<boolean> {
	const open = client instanceof WebSocket ? client.readyState !== WebSocket.CLOSED : client.connected;
	if (!open) return Promise.resolve(true);
	return new Promise((resolve) => {
		const t = setTimeout(() => resolve(false), ms);
		client.once("close", () => (clearTimeout(t), resolve(true)));
	});
}

/** A raw WebSocket on /mqtt, open (optionally as the browser at `ip`, through X-Forwarded-For). */
function rawSocket(wsUrl: string, ip?: string): Promise<WebSocket> {
	const ws = new WebSocket(wsUrl, "mqtt", { headers: ip ? { "x-forwarded-for": ip } : {} });
	return new Promise((resolve, reject) => {
		ws.once("open", () => resolve(ws));
		ws.once("unexpected-response", (_req, res) => reject(Object.assign(new Error(`upgrade answered ${res.statusCode}`), { status: res.statusCode })));
		ws.once("error", reject);
	});
}

describe("MQTT over WebSocket", () => {
	let t: Tenancy;
	let p: TestPlatform;
	let wsUrl: string;
	let tcpUrl: string;
	const open: Array<MqttClient | WebSocket> = [];
	const connect = async (opts: mqtt.IClientOptions, url = wsUrl) => {
		const c = await mqtt.connectAsync(url, { reconnectPeriod: 0, connectTimeout: 5000, clientId: `ws-${randomBytes(6).toString("hex")}`, ...opts }, false);
		open.push(c);
		return c;
	};
	const noteTopic = (owner: string) => `platform/owner/${owner}/content/notes/#`;

	beforeAll(async () => {
		t = await bootTenancy({ trustProxy: true });
		p = t.p;
		wsUrl = `${p.url.replace(/^http/, "ws")}/mqtt`;
		tcpUrl = (await p.broker.call<{ url: string }, object>("preserver.brokerUrl", {})).url;
	});

	afterEach(async () => {
		for (const c of open.splice(0)) {
			if (c instanceof WebSocket) c.terminate();
			else await c.endAsync(true).catch(() => undefined);
		}
	});

	afterAll(async () => {
		await t?.cleanup();
	});

	test("a token logs in over /mqtt and the changes of its topics arrive; the broker sees the browser's address", async () => {
		const { member } = t.a;
		const c = await connect({ username: member.id, password: member.token, clientId: `seen-${randomBytes(4).toString("hex")}` }, wsUrl);
		expect(await subscribe(c, noteTopic(member.id))).toBe(1);
		const got = new Promise<{ topic: string; body: any }>((resolve) => c.on("message", (topic, payload) => resolve({ topic, body: JSON.parse(payload.toString()) })));
		const note = (await t.as(member.token, "POST", "/content/notes", { title: "over websocket" })).body.data;
		const m = await got;
		expect(m.topic).toBe(`platform/owner/${member.id}/content/notes/${note.id}`);
		expect(m.body).toMatchObject({ id: note.id, op: "c", after: { title: "over websocket", owner: member.id } });
		const clients = await p.broker.call<Array<{ clientid: string; via: string; peerhost?: string }>, object>("preserver.clients", {});
		expect(clients.find((x) => x.clientid === c.options.clientId)).toMatchObject({ via: "websocket", peerhost: "127.0.0.1" });
	});

	test("a bad token, a token of another identity, a missing password and a guessed publisher secret are refused (CONNACK 5)", async () => {
		const { member } = t.a;
		expect(await refusal(wsUrl, { username: member.id, password: "not-a-token" })).toBe(5);
		expect(await refusal(wsUrl, { username: member.id, password: `${member.token.slice(0, -4)}AAAA` })).toBe(5);
		expect(await refusal(wsUrl, { username: t.b.member.id, password: member.token })).toBe(5);
		expect(await refusal(wsUrl, { username: member.id })).toBe(5);
		expect(await refusal(wsUrl, { username: "$publisher", password: "guess" })).toBe(5);
	});

	test("a client id belongs to the identity that first used it, over WebSocket and TCP alike", async () => {
		const id = `mine-${randomBytes(4).toString("hex")}`;
		const owner = await connect({ username: t.a.member.id, password: t.a.member.token, clientId: id });
		expect(await refusal(wsUrl, { username: t.b.member.id, password: t.b.member.token, clientId: id })).toBe(5);
		expect(await refusal(tcpUrl, { username: t.b.member.id, password: t.b.member.token, clientId: id })).toBe(5);
		await sleep(100);
		expect(owner.connected).toBe(true);
		// A claim made over TCP holds over WebSocket.
		const tcpId = `tcp-${randomBytes(4).toString("hex")}`;
		await connect({ username: t.b.member.id, password: t.b.member.token, clientId: tcpId }, tcpUrl);
		expect(await refusal(wsUrl, { username: t.a.member.id, password: t.a.member.token, clientId: tcpId })).toBe(5);
	});

	test("another tenant's, another user's and another client's topics are refused (SUBACK 128)", async () => {
		const { a, b } = t;
		const c = await connect({ username: a.member.id, password: a.member.token });
		expect(await subscribe(c, noteTopic(b.member.id))).toBe(128);
		expect(await subscribe(c, noteTopic(a.admin.id))).toBe(128);
		expect(await subscribe(c, `platform/client/${b.client.id}/content/notes/#`)).toBe(128);
		expect(await subscribe(c, "$share/g/platform/#")).toBe(128);
		expect(await subscribe(c, "#")).toBe(128);
		expect(await subscribe(c, noteTopic(a.member.id))).toBe(1);
	});

	test("publishing is refused, a packet over 1 MiB or a message over the WebSocket limit closes the connection", async () => {
		const { member } = t.a;
		const forger = await connect({ username: member.id, password: member.token });
		forger.publish(`platform/owner/${member.id}/content/notes/ffffffffffffffffffffffff`, "{}", { qos: 1 });
		expect(await closedWithin(forger, 5000)).toBe(true);
		// A PUBLISH header announcing 2 MiB, in a small frame: closed at the header.
		const big = await connect({ username: member.id, password: member.token });
		(big as any).stream.write(Buffer.concat([Buffer.from([0x30]), connectHeader(2 * 1024 * 1024).subarray(1), Buffer.alloc(64)]));
		expect(await closedWithin(big, 5000)).toBe(true);
		// One WebSocket message over the gateway's limit: closed by the gateway (1009) before the broker sees it.
		const huge = await connect({ username: member.id, password: member.token });
		(huge as any).stream.write(Buffer.alloc(MQTT_WS_MAX_MESSAGE + 1));
		expect(await closedWithin(huge, 5000)).toBe(true);
	});

	test(`at most ${MQTT_MAX_CONNECTIONS} connections per identity over WebSocket too: the next is refused (CONNACK 5)`, async () => {
		const { limited } = t.a;
		for (let i = 0; i < MQTT_MAX_CONNECTIONS; i++) await connect({ username: limited.id, password: limited.token });
		expect(await refusal(wsUrl, { username: limited.id, password: limited.token })).toBe(5);
	});

	test("before its login a connection may send 16 KiB: a bigger frame, or a CONNECT announcing 1 MiB, closes it", async () => {
		const flood = await rawSocket(wsUrl);
		open.push(flood);
		flood.send(Buffer.concat([connectHeader(64 * 1024), Buffer.alloc(64 * 1024)]));
		expect(await closedWithin(flood, 5000)).toBe(true);
		const announce = await rawSocket(wsUrl);
		open.push(announce);
		announce.send(connectHeader(1024 * 1024));
		expect(await closedWithin(announce, 5000)).toBe(true);
		const text = await rawSocket(wsUrl);
		open.push(text);
		text.send("CONNECT");
		expect(await closedWithin(text, 5000)).toBe(true);
	});

	test(`the browser's address is counted: ${MQTT_PREAUTH.maxPerIp} connections not yet logged in from one address, the next refused with 503; another address is served`, async () => {
		const ip = `203.0.113.${1 + Math.floor(Math.random() * 200)}`;
		for (let i = 0; i < MQTT_PREAUTH.maxPerIp; i++) open.push(await rawSocket(wsUrl, ip));
		await expect(rawSocket(wsUrl, ip)).rejects.toMatchObject({ status: 503 });
		const r = await upgrade(p.url, "/mqtt", { "sec-websocket-protocol": "mqtt", "x-forwarded-for": ip });
		expect(r).toMatchObject({ status: 503, body: ENVELOPE(503, MQTT_WS_MESSAGES.refused, "Service Unavailable"), headers: { "retry-after": "5" } });
		// Another browser, and a login from the full address over TCP-like trust are unaffected.
		const other = await connect({ username: t.a.member.id, password: t.a.member.token, wsOptions: { headers: { "x-forwarded-for": "198.51.100.7" } } } as mqtt.IClientOptions);
		expect(other.connected).toBe(true);
	});

	test("a logout closes the WebSocket connection of that token, and its later logins are refused", async () => {
		const token = await t.login(t.a, t.a.member.username, t.a.member.password);
		const c = await connect({ username: t.a.member.id, password: token });
		expect(await subscribe(c, noteTopic(t.a.member.id))).toBe(1);
		expect((await p.http("GET", "/auth/logout", { token })).status).toBe(200);
		expect(await closedWithin(c, 5000)).toBe(true);
		expect(await refusal(wsUrl, { username: t.a.member.id, password: token })).toBe(5);
	});

	test("other paths, other upgrades and other subprotocols are refused before the upgrade, in the error envelope", async () => {
		expect(await upgrade(p.url, "/mqtt", { "sec-websocket-protocol": "mqtt" })).toMatchObject({ status: 101, headers: { "sec-websocket-protocol": "mqtt" } });
		expect(await upgrade(p.url, "/mqtt?x=1", { "sec-websocket-protocol": "chat, mqtt" })).toMatchObject({ status: 101, headers: { "sec-websocket-protocol": "mqtt" } });
		for (const path of ["/", "/mqtt/", "/MQTT", "/content/notes/cursor", "/mqtt/../x", `/${"a".repeat(4000)}`])
			expect(await upgrade(p.url, path, { "sec-websocket-protocol": "mqtt" })).toMatchObject({ status: 404, body: ENVELOPE(404, MQTT_WS_MESSAGES.path, "Not Found") });
		for (const protocol of [undefined, "mqttv3.1", "chat", "MQTT", "mqtt5"])
			expect(await upgrade(p.url, "/mqtt", protocol ? { "sec-websocket-protocol": protocol } : {})).toMatchObject({
				status: 400,
				body: ENVELOPE(400, MQTT_WS_MESSAGES.protocol, "Bad Request"),
			});
		expect(await upgrade(p.url, "/mqtt", { upgrade: "h2c", "sec-websocket-protocol": "mqtt" })).toMatchObject({
			status: 400,
			body: ENVELOPE(400, MQTT_WS_MESSAGES.notWebSocket, "Bad Request"),
		});
	});

	test("a bridge preamble is honoured only with the deployment's secret: a forged one is closed unanswered", async () => {
		const { hostname, port } = new URL(tcpUrl);
		/** What the broker answers a preamble followed by an anonymous CONNECT, until it closes (or 1 s). */
		const answer = (preamble: Buffer) =>
			new Promise<Buffer>((resolve) => {
				const s = net.connect(Number(port), hostname);
				const got: Buffer[] = [];
				const done = () => (s.destroy(), resolve(Buffer.concat(got)));
				setTimeout(done, 1000);
				s.on("data", (c) => got.push(c));
				s.on("error", () => undefined);
				s.on("close", done);
				s.write(preamble);
				s.write(Buffer.from("100f00044d5154540402003c000378797a", "hex")); // CONNECT, client id "xyz", no login
			});
		const real = bridgePassword(keysOf(p).jwtSecret);
		// The right secret: acknowledged (0), then the broker's CONNACK refusing the anonymous login (code 5).
		expect([...(await answer(bridgePreamble(real, "10.1.2.3")))]).toEqual([0, 0x20, 2, 0, 5]);
		for (const forged of [
			bridgePreamble("guessed", "10.1.2.3"),
			bridgePreamble(real, "not-an-ip"),
			bridgePreamble(`${real} x`, "10.1.2.3"),
			Buffer.concat([Buffer.from([0]), Buffer.alloc(300, 65)]),
		])
			expect((await answer(forged)).length).toBe(0);
	});

	test("without a preserver in reach the upgrade answers 503 with Retry-After (last: it stops the broker)", async () => {
		await p.broker.destroyService(p.broker.getLocalService("preserver")!);
		const r = await upgrade(p.url, "/mqtt", { "sec-websocket-protocol": "mqtt" });
		expect(r).toMatchObject({ status: 503, body: ENVELOPE(503, MQTT_WS_MESSAGES.noBroker, "Service Unavailable"), headers: { "retry-after": "5" } });
	});
});

describe("MQTT over WebSocket with an external broker (MQTT_URL)", () => {
	let p: TestPlatform;
	beforeAll(async () => {
		p = await bootPlatform({ mqttUrl: "mqtt://127.0.0.1:1" });
	});
	afterAll(async () => {
		await p?.cleanup();
	});

	test("the gateway answers 404: that broker's own WebSocket listener serves browsers", async () => {
		const r = await upgrade(p.url, "/mqtt", { "sec-websocket-protocol": "mqtt" });
		expect(r).toMatchObject({ status: 404, body: ENVELOPE(404, MQTT_WS_MESSAGES.external, "Not Found") });
	});
});
