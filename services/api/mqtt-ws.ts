/**
 * MQTT over WebSocket on the gateway's port (docs/realtime.md, docs/mqtt.md "MQTT over WebSocket"): an upgrade on
 * `/mqtt` with the subprotocol `mqtt` is bridged, byte for byte, to the embedded broker's TCP listener (the preserver,
 * found through `preserver.brokerUrl`, on this node or another). The broker's login, client-id ownership, ACL and
 * limits then apply unchanged, by construction: this file adds no rule of its own, only bounds on what the gateway
 * itself holds. Before any MQTT byte the bridge names the browser's address (lib/mqtt.ts bridgePreamble), so the
 * broker's per-address caps and the grants' IP conditions see the browser, not the gateway.
 *
 * Refused before the upgrade, in the error envelope: another path (404), an upgrade that is not a WebSocket or lacks
 * the `mqtt` subprotocol (400), a platform on an external broker (404: that broker's own WebSocket listener serves
 * browsers), no preserver in reach or a broker that refuses the connection (503, Retry-After). No Origin check: the
 * credential is the token inside the MQTT CONNECT, never an ambient cookie, so another site's page can only use a
 * token it already holds (as with a bearer on the REST API, services/api/cross-site.ts).
 */
import type { IncomingMessage, Server } from "http";
import net from "net";
import type { Duplex } from "stream";
import type { LoggerInstance, ServiceBroker } from "moleculer";
import { WebSocketServer, type WebSocket } from "ws";
import { BRIDGE_ACK, bridgePassword, bridgePreamble, MQTT_MAX_PACKET, MQTT_PREAUTH } from "../../lib/mqtt";
import { STATUS_NAMES } from "../../lib/errors";
import { callerIp } from "../../authority/authenticate";

export const MQTT_WS_PATH = "/mqtt";
export const MQTT_WS_PROTOCOL = "mqtt";
/** Largest WebSocket message: one MQTT packet at the broker's limit, with room for its fixed header. */
export const MQTT_WS_MAX_MESSAGE = MQTT_MAX_PACKET + 1024;
/**
 * Bytes a browser may send (WebSocket framing included) before the broker accepts its login: the broker's own
 * MQTT_PREAUTH.maxBytes plus framing. Counted on the raw socket, so no large frame is buffered by an anonymous peer.
 */
export const MQTT_WS_PREAUTH_BYTES = MQTT_PREAUTH.maxBytes + 1024;
/**
 * Bridge connections this gateway has waiting for the broker's answer to their preamble at once. Until it answers,
 * the broker counts such a connection under the gateway's own address (capped at MQTT_PREAUTH.maxPerIp), so a burst
 * of browsers is let through a few at a time rather than refused there; the rest wait in line (bounded).
 */
const BRIDGE_HANDSHAKES = 8;
const BRIDGE_QUEUE = MQTT_PREAUTH.maxConnections;
/** Broker output waiting for a slow browser before the broker's side is paused. */
const HIGH_WATER = 1024 * 1024;
const RETRY_AFTER_S = 5;

export const MQTT_WS_MESSAGES = {
	path: `no WebSocket endpoint here: MQTT over WebSocket is served on ${MQTT_WS_PATH}`,
	notWebSocket: "the upgrade must be to websocket",
	protocol: `the WebSocket subprotocol must be ${MQTT_WS_PROTOCOL} (Sec-WebSocket-Protocol: ${MQTT_WS_PROTOCOL})`,
	external: "MQTT over WebSocket is not served by the gateway when the platform uses an external broker (MQTT_URL): connect to that broker's WebSocket listener",
	noBroker: "the MQTT broker is not reachable: no preserver answers",
	refused: "the MQTT broker refused the connection (too many connections not yet authenticated, or it is stopping); retry later",
	busy: "too many MQTT over WebSocket connections are being opened; retry later",
} as const;

/** Answers an upgrade request with an HTTP error in the platform's envelope and closes the socket. */
function refuse(socket: Duplex, status: number, message: string): void {
	if (socket.destroyed) return;
	const text = JSON.stringify({ statusCode: status, message, error: STATUS_NAMES[status] ?? "Error" });
	const retry = status === 503 ? `Retry-After: ${RETRY_AFTER_S}\r\n` : "";
	socket.end(
		`HTTP/1.1 ${status} ${STATUS_NAMES[status] ?? "Error"}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n` +
			`Cache-Control: no-store\r\n${retry}Content-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
	);
}

/** The upgrade's problem as [status, message], or null when it is a WebSocket upgrade on /mqtt offering `mqtt`. */
export function checkUpgrade(req: IncomingMessage): [number, string] | null {
	const pathname = (req.url ?? "").split("?")[0];
	if (pathname !== MQTT_WS_PATH) return [404, MQTT_WS_MESSAGES.path];
	if (req.method !== "GET" || String(req.headers.upgrade ?? "").toLowerCase() !== "websocket") return [400, MQTT_WS_MESSAGES.notWebSocket];
	const offered = String(req.headers["sec-websocket-protocol"] ?? "")
		.split(",")
		.map((p) => p.trim());
	if (!offered.includes(MQTT_WS_PROTOCOL)) return [400, MQTT_WS_MESSAGES.protocol];
	return null;
}

/**
 * Has the broker's first packet (the CONNACK) accepted the login? `undefined` while fewer bytes than it needs have
 * come; true when its return (reason) code is 0. Works for MQTT 3.1.1 and 5 (the code follows the flags byte).
 */
export function connackAccepted(head: Buffer): boolean | undefined {
	if (!head.length) return undefined;
	if (head[0] >> 4 !== 2) return false;
	let i = 1;
	while (i < head.length && i < 5 && head[i] & 0x80) i++;
	if (i >= 5) return false;
	return i + 2 < head.length ? head[i + 2] === 0 : undefined;
}

/** A first-come line of bounded length with a bounded number of holders. */
class Slots {
	private held = 0;
	private readonly waiting: Array<() => void> = [];
	constructor(
		private readonly size: number,
		private readonly queue: number,
	) {}
	/** A release, once a slot is free; null when the line is full. */
	acquire(): Promise<() => void> | null {
		if (this.held >= this.size && this.waiting.length >= this.queue) return null;
		return new Promise((resolve) => {
			let done = false;
			const grant = () => {
				this.held++;
				resolve(() => {
					if (done) return;
					done = true;
					this.held--;
					this.waiting.shift()?.();
				});
			};
			if (this.held < this.size) grant();
			else this.waiting.push(grant);
		});
	}
}

interface Options {
	broker: ServiceBroker;
	logger: LoggerInstance;
	jwtSecret: string;
	trustProxy: boolean;
}

export class MqttWebSocketBridge {
	private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MQTT_WS_MAX_MESSAGE, perMessageDeflate: false, handleProtocols: () => MQTT_WS_PROTOCOL });
	private readonly password: string;
	private readonly slots = new Slots(BRIDGE_HANDSHAKES, BRIDGE_QUEUE);
	private readonly open = new Set<{ ws?: WebSocket; tcp: net.Socket; client: Duplex }>();
	private closed = false;

	constructor(private readonly o: Options) {
		this.password = bridgePassword(o.jwtSecret);
	}

	/** Takes the server's upgrades (every path: those it does not serve are refused, never left hanging). */
	attach(server: Server): void {
		server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
			socket.on("error", () => undefined);
			this.upgrade(req, socket, head).catch((err) => {
				this.o.logger.warn(`mqtt over websocket: upgrade failed: ${err?.message ?? err}`);
				refuse(socket, 503, MQTT_WS_MESSAGES.noBroker);
			});
		});
	}

	/** Ends every bridged connection (the gateway stops: its server's close waits for them otherwise). */
	close(): void {
		this.closed = true;
		for (const c of this.open) {
			c.ws?.terminate();
			c.tcp.destroy();
			c.client.destroy();
		}
		this.open.clear();
		this.wss.close();
	}

	get size(): number {
		return this.open.size;
	}

	private async brokerAddress(): Promise<{ host: string; port: number } | null | undefined> {
		let answer: { url: string } | null;
		try {
			answer = await this.o.broker.call("preserver.brokerUrl", {}, { timeout: 2000, retries: 0 });
		} catch {
			return undefined; // no preserver in reach
		}
		if (!answer?.url) return null; // an external broker (MQTT_URL)
		const u = new URL(answer.url);
		return { host: u.hostname.replace(/^\[|\]$/g, ""), port: Number(u.port) };
	}

	private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
		const problem = this.closed ? ([503, MQTT_WS_MESSAGES.noBroker] as [number, string]) : checkUpgrade(req);
		if (problem) return refuse(socket, ...problem);
		// Bytes the browser sends before its login is accepted, WebSocket framing included (bounded from here on).
		let sent = head.length;
		let authenticated = false;
		const countPreAuth = (chunk: Buffer) => {
			if (!authenticated && (sent += chunk.length) > MQTT_WS_PREAUTH_BYTES) socket.destroy();
		};
		socket.on("data", countPreAuth);
		const address = await this.brokerAddress();
		if (address === undefined) return refuse(socket, 503, MQTT_WS_MESSAGES.noBroker);
		if (address === null) return refuse(socket, 404, MQTT_WS_MESSAGES.external);
		const turn = this.slots.acquire();
		if (!turn) return refuse(socket, 503, MQTT_WS_MESSAGES.busy);
		const release = await turn;
		let tcp: net.Socket;
		try {
			tcp = await this.connectBroker(address, callerIp(req, this.o.trustProxy), socket);
		} catch (err) {
			return refuse(socket, 503, (err as Error).message === "refused" ? MQTT_WS_MESSAGES.refused : MQTT_WS_MESSAGES.noBroker);
		} finally {
			release();
		}
		if (socket.destroyed || this.closed) return void tcp.destroy();
		const conn: { ws?: WebSocket; tcp: net.Socket; client: Duplex } = { tcp, client: socket };
		this.open.add(conn);
		tcp.once("close", () => this.open.delete(conn));
		this.wss.handleUpgrade(req, socket, head, (ws) => {
			conn.ws = ws;
			this.pipe(ws, tcp, () => {
				authenticated = true;
				socket.off("data", countPreAuth);
			});
		});
	}

	/** A TCP connection to the broker that has accepted the bridge preamble for `ip`; rejects with "refused" otherwise. */
	private connectBroker(address: { host: string; port: number }, ip: string, client: Duplex): Promise<net.Socket> {
		return new Promise((resolve, reject) => {
			const tcp = net.connect(address.port, address.host);
			const settle = () => {
				clearTimeout(timer);
				client.off("close", onClientClose);
				tcp.off("close", onClose);
			};
			const fail = (why: string) => {
				settle();
				tcp.destroy();
				reject(new Error(why));
			};
			const onClientClose = () => fail("gone");
			const onClose = () => fail("refused");
			const timer = setTimeout(onClose, MQTT_PREAUTH.connectTimeoutMs);
			tcp.on("error", () => undefined);
			tcp.once("close", onClose);
			client.once("close", onClientClose);
			tcp.write(bridgePreamble(this.password, ip));
			tcp.once("readable", function onReadable(this: net.Socket) {
				const first: Buffer | null = tcp.read(1);
				if (first === null) return void tcp.once("readable", onReadable);
				if (first[0] !== BRIDGE_ACK) return fail("refused");
				settle();
				resolve(tcp);
			});
		});
	}

	/** Browser to broker and back, with backpressure both ways; either side closing closes the other. */
	private pipe(ws: WebSocket, tcp: net.Socket, onLogin: () => void): void {
		let head: Buffer | undefined = Buffer.alloc(0);
		ws.on("message", (data: Buffer, isBinary: boolean) => {
			if (!isBinary) return ws.close(1003, "MQTT over WebSocket takes binary frames only");
			if (!tcp.write(data)) {
				ws.pause();
				tcp.once("drain", () => ws.resume());
			}
		});
		tcp.on("data", (chunk: Buffer) => {
			if (head) {
				head = Buffer.concat([head, chunk]);
				const accepted = connackAccepted(head.subarray(0, 8));
				if (accepted !== undefined || head.length >= 8) {
					if (accepted) onLogin();
					head = undefined;
				}
			}
			ws.send(chunk, { binary: true }, () => {
				if (tcp.isPaused() && ws.bufferedAmount < HIGH_WATER / 2) tcp.resume();
			});
			if (ws.bufferedAmount > HIGH_WATER) tcp.pause();
		});
		tcp.on("error", (err) => this.o.logger.debug(`mqtt over websocket: broker side: ${err.message}`));
		ws.on("error", (err) => this.o.logger.debug(`mqtt over websocket: browser side: ${err.message}`));
		tcp.on("close", () => {
			if (ws.readyState === ws.OPEN) ws.close(1000, "the broker closed the connection");
			// A browser that does not answer the close is cut after a short while.
			setTimeout(() => ws.terminate(), 2000).unref();
		});
		ws.on("close", () => tcp.destroy());
	}
}
