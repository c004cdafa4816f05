/**
 * preserver (4030): the MQTT broker's authentication and session-lifecycle hooks (docs/mqtt.md).
 *
 * - EMQX-style HTTP hooks on the preserver's own port (4030 + OPS_PORT_OFFSET, beside /status and /metrics, so on
 *   whenever its ops port is: SERVICE_PORTS=1 or a node without the gateway): `POST /mqtt/auth`, `POST /mqtt/acl`,
 *   `POST /mqtt/connected`, `POST /mqtt/disconnected`.
 * - In the embedded default (no MQTT_URL) an aedes broker on MQTT_PORT (0 = a free port) wired to the same checks;
 *   the publisher finds it through the `preserver.brokerUrl` action.
 *
 * Login: username = the token's identity (uid, else aid, else cid), password = a JWT or an APT, verified by the
 * gateway's Authenticator (signature, APT record, session blacklist; strict tokens cannot carry an x-api-key here,
 * so they are refused). Topics: lib/mqtt.ts. A revoked session or APT closes the embedded broker's connections
 * of that token at once; with an external broker its ACL answers turn to deny.
 *
 * The embedded broker also decides every message it delivers to a token holder (./preserver/forward.ts) with the
 * holder's token and this node's grant index of the moment, and authenticates each holder's token again every
 * MQTT_SWEEP_MS: a connection whose token stopped being valid (revoked, logged out, user deactivated, expired) is closed.
 */
import { AUTHORITY_CHANGED } from "../lib/contracts";
import net, { type AddressInfo } from "net";
import type { IncomingMessage, ServerResponse } from "http";
import type { Context, Service, ServiceBroker } from "moleculer";
import { Aedes, type AuthenticateError, type Client as AedesClient } from "aedes";
import { configOf, loadKeys, type PlatformConfig } from "../runtime/config";
import { Aes, safeEqual, sha256Hex } from "../lib/crypto";
import { sharedKeyValue, type KeyValue } from "../runtime/kv";
import {
	authorizePublish,
	authorizeSubscribe,
	BRIDGE_ACK,
	BRIDGE_PREAMBLE_MAX,
	bridgePassword,
	MQTT_MAX_PACKET,
	MQTT_PREAUTH,
	parseBridgePreamble,
	PreAuthGate,
	PUBLISHER_USERNAME,
	publisherPassword,
	type AclDecision,
} from "../lib/mqtt";
import { JwtKeys } from "../lib/tokens";
import { identityOf, type TokenClaims } from "../lib/types";
import { grantCache } from "../authority/grant-cache";
import type { GrantIndex } from "../lib/grants";
import { createStore, isDuplicateKeyError, locationOf, type DocumentStore } from "../stores";
import { Authenticator, USER_CHANGED } from "../authority/authenticate";
import { WORKER_PORTS } from "./index";
import { workerService } from "./worker";
import { ForwardViews } from "./preserver/forward";

/** Who an MQTT connection is: the platform's publisher, or a token holder. */
export interface MqttPrincipal {
	username: string;
	publisher?: boolean;
	identity?: string;
	token?: TokenClaims;
	/** sha256 of the APT suffix when the password was an APT (its revocation broadcast names this hash). */
	aptHash?: string;
}

export interface MqttConnection {
	clientid: string;
	username: string;
	via: "embedded" | "websocket" | "hooks";
	peerhost?: string;
	connected_at: string;
}

const MAX_BODY = 16 * 1024;
const MAX_RECORDS = 100_000;
const PUBLISHER_TTL_MS = 24 * 3600 * 1000;
const PRINCIPAL = Symbol("mqttPrincipal");
/** The connection's slot among the unauthenticated ones (lib/mqtt.ts PreAuthGate), released once it is authenticated. */
const PREAUTH = Symbol("mqttPreAuth");
export const BROKER_URL_ACTION = "preserver.brokerUrl";
const clientKey = (clientid: string) => `mqtt:client:${sha256Hex(clientid)}`;
/** The address the connection counts under and its grants see: the socket's, or the one the gateway's bridge named. */
const PEER = Symbol("mqttPeer");
/** The connection came through the gateway's MQTT-over-WebSocket bridge. */
const BRIDGED = Symbol("mqttBridged");
/** A token holder's password (the bearer it logged in with), authenticated again by each sweep; never stored elsewhere. */
const BEARER = Symbol("mqttBearer");
/** A token holder's views (./preserver/forward.ts), made at its first message. */
const VIEWS = Symbol("mqttViews");
/** A sweep's check of this token holder is under way. */
const CHECKING = Symbol("mqttChecking");
/** A connection as the preserver marks it (the symbols above). */
type Marked = AedesClient & {
	[PRINCIPAL]?: MqttPrincipal;
	[PREAUTH]?: () => void;
	[PEER]?: string;
	[BRIDGED]?: boolean;
	[BEARER]?: string;
	[VIEWS]?: ForwardViews;
	[CHECKING]?: boolean;
};
const marked = (client: AedesClient) => client as Marked;
/** How often each token holder's token is authenticated again (a token no longer valid is disconnected within 2 s). */
export const MQTT_SWEEP_MS = 1000;
export { MQTT_MAX_PACKET };
/** Open connections one identity may hold on the embedded broker. */
export const MQTT_MAX_CONNECTIONS = 8;
/** Client ids whose owner this node already knows (an owner never changes). */
const MAX_OWNERS_CACHED = 10_000;

/**
 * Who owns which MQTT client id: the identity that first used it. In the document store (the embedded PostgreSQL
 * under DATA_DIR, or DATABASE_URL): durable across restarts, and, with a shared database, one answer for every
 * preserver; the first claim wins atomically on the unique `id`. Not in the cache: by default it is process memory
 * (lost at restart), and a Redis may run without persistence or evict keys, which would hand a session to the next
 * identity that asks. One store per database per process (several nodes of one process share one in tests).
 */
const ownerStores = new Map<string, { store: DocumentStore; ready: Promise<void>; users: number }>();

function acquireOwners(cfg: PlatformConfig): { store: DocumentStore; ready: Promise<void> } {
	const key = locationOf(cfg);
	let e = ownerStores.get(key);
	if (!e) {
		const store = createStore(cfg, "_mqtt_clients");
		e = { store, ready: store.connect(), users: 0 };
		ownerStores.set(key, e);
		e.ready.catch(() => ownerStores.delete(key));
	}
	e.users++;
	return e;
}

async function releaseOwners(cfg: PlatformConfig): Promise<void> {
	const key = locationOf(cfg);
	const e = ownerStores.get(key);
	if (!e || --e.users > 0) return;
	ownerStores.delete(key);
	await e.ready.then(() => e.store.disconnect()).catch(() => undefined);
}

const AUTH_TOTAL = "preserver.mqtt.auth.total";
const ACL_TOTAL = "preserver.mqtt.acl.total";
const CLIENTS = "preserver.mqtt.clients";
const FORWARD_TOTAL = "preserver.mqtt.forward.total";

function registerMetrics(broker: ServiceBroker): void {
	if (!broker.isMetricsEnabled()) return;
	const m = broker.metrics;
	if (!m.hasMetric(AUTH_TOTAL)) m.register({ type: "counter", name: AUTH_TOTAL, labelNames: ["result"], description: "MQTT logins by result" });
	if (!m.hasMetric(ACL_TOTAL)) m.register({ type: "counter", name: ACL_TOTAL, labelNames: ["action", "result"], description: "MQTT topic checks by action and result" });
	if (!m.hasMetric(CLIENTS)) m.register({ type: "gauge", name: CLIENTS, description: "MQTT connections the preserver knows of" });
	if (!m.hasMetric(FORWARD_TOTAL))
		m.register({
			type: "counter",
			name: FORWARD_TOTAL,
			labelNames: ["result"],
			description: "Messages the embedded broker was about to deliver to token holders, by decision (whole, narrowed, withheld)",
		});
}

function readBody(req: IncomingMessage): Promise<Record<string, unknown> | null> {
	return new Promise((resolve) => {
		let size = 0;
		const chunks: Buffer[] = [];
		req.on("data", (c: Buffer) => {
			size += c.length;
			if (size > MAX_BODY) {
				resolve(null);
				req.destroy();
			} else chunks.push(c);
		});
		req.on("error", () => resolve(null));
		req.on("end", () => {
			const text = Buffer.concat(chunks).toString("utf8");
			const type = String(req.headers["content-type"] ?? "");
			try {
				if (type.includes("application/x-www-form-urlencoded")) return resolve(Object.fromEntries(new URLSearchParams(text)));
				const v = text ? JSON.parse(text) : {};
				resolve(v && typeof v === "object" && !Array.isArray(v) ? v : null);
			} catch {
				resolve(null);
			}
		});
	});
}

/** What limitPacketSize uses of mqtt-packet's parser (private to aedes: checked at start). */
interface PacketParser {
	_parseLength(): boolean;
	parse(buf: Buffer): number;
	packet: { length: number };
	_list: { consume(n: number): void; length: number };
	_emitError(err: Error): void;
}

/**
 * Closes a connection as soon as a packet's fixed header announces more than MQTT_MAX_PACKET (before the payload is
 * read, so nothing of it is buffered), unless the connection is the platform's own publisher (a change event may be
 * larger); before it is authenticated, as soon as it announces or sends more than MQTT_PREAUTH.maxBytes in all.
 * Hooks the parser aedes made for this connection; fails loudly at start if aedes ever changes it.
 */
function limitPacketSize(client: AedesClient, socket: net.Socket): boolean {
	const parser = (client as unknown as { _parser?: PacketParser })._parser;
	if (!parser || typeof parser._parseLength !== "function") {
		// Refuse rather than serve without the limit (an aedes upgrade moved the parser).
		socket.destroy();
		return false;
	}
	const parseLength = parser._parseLength;
	const limit = () => (marked(client)[PRINCIPAL] ? MQTT_MAX_PACKET : MQTT_PREAUTH.maxBytes);
	parser._parseLength = function (this: PacketParser) {
		const ok = parseLength.call(this);
		if (ok && this.packet.length > limit() && !marked(client)[PRINCIPAL]?.publisher) {
			socket.destroy();
			this._list.consume(this._list.length);
			this._emitError(new Error(`packet of ${this.packet.length} bytes is over ${limit()}`));
			return false;
		}
		return ok;
	};
	let unauthenticated = 0;
	const parse = parser.parse;
	parser.parse = function (this: PacketParser, buf: Buffer) {
		if (!marked(client)[PRINCIPAL] && (unauthenticated += buf.length) > MQTT_PREAUTH.maxBytes) {
			socket.destroy();
			return 0;
		}
		return parse.call(this, buf);
	};
	return true;
}

/**
 * A connection from the gateway's MQTT-over-WebSocket bridge starts with a preamble (lib/mqtt.ts bridgePreamble):
 * resolves with the browser's address it names, `undefined` when the connection starts otherwise (plain MQTT: what
 * was read is put back), or null when the preamble is wrong or too long, or the socket closed first (close it).
 */
function readBridgePreamble(socket: net.Socket, password: string): Promise<string | null | undefined> {
	return new Promise((resolve) => {
		let got = Buffer.alloc(0);
		const done = (v: string | null | undefined, rest?: Buffer) => {
			socket.off("readable", onReadable);
			socket.off("close", onClose);
			if (rest?.length) socket.unshift(rest);
			resolve(v);
		};
		const onClose = () => done(null);
		const onReadable = () => {
			let chunk: Buffer | null;
			while ((chunk = socket.read()) !== null) {
				got = Buffer.concat([got, chunk]);
				if (got[0] !== 0) return done(undefined, got);
				const end = got.indexOf(0x0a);
				if (end < 0 && got.length >= BRIDGE_PREAMBLE_MAX) return done(null);
				if (end >= 0) return done(end < BRIDGE_PREAMBLE_MAX ? parseBridgePreamble(got.subarray(1, end).toString("latin1"), password) : null, got.subarray(end + 1));
			}
		};
		socket.on("readable", onReadable);
		socket.once("close", onClose);
	});
}

function reply(res: ServerResponse, status: number, body: unknown): void {
	const text = JSON.stringify(body);
	res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text), "Cache-Control": "no-store" });
	res.end(text);
}

const str = (v: unknown): string | undefined => (typeof v === "string" && v.length <= 4096 ? v : undefined);

type Hook = (b: Record<string, unknown>) => Promise<{ result: string; is_superuser?: boolean }>;

/** The preserver's `this`: its state (set in `created`, `started` and `startEmbedded`) and its methods. */
type Svc = Service & {
	cfg: PlatformConfig;
	kv: KeyValue;
	authenticator: Authenticator;
	publisherSecret: string;
	bridgeSecret: string;
	/** Known connections by client id. */
	connections: Map<string, MqttConnection>;
	/** Sessions revoked lately (their token holders are refused at once). */
	revoked: Set<string>;
	embeddedClients: Map<string, AedesClient>;
	owners: Map<string, string>;
	openByIdentity: Map<string, Set<AedesClient>>;
	ownersHeld: boolean;
	ownerStore?: DocumentStore;
	grants?: GrantIndex;
	aedes?: Aedes;
	mqttServer?: net.Server;
	embeddedUrl?: string;
	holderAdmitted?: boolean;
	sweepTimer?: NodeJS.Timeout;
	login(username: unknown, password: unknown): Promise<MqttPrincipal | null>;
	verifyLogin(username: unknown, password: unknown): Promise<MqttPrincipal | null>;
	claimClientId(clientid: string, p: MqttPrincipal): Promise<boolean>;
	stillValid(p: MqttPrincipal): Promise<boolean>;
	aclCheck(p: MqttPrincipal, action: unknown, topic: unknown, ip?: string): Promise<AclDecision>;
	currentGrants(): Promise<GrantIndex>;
	forward(client: AedesClient, p: MqttPrincipal, packet: { topic: string; payload: Buffer }): Buffer | null;
	sweep(): Promise<void[]>;
	recheck(client: AedesClient): Promise<void>;
	rememberRevoked(session: string): void;
	recordConnected(c: MqttConnection): void;
	recordDisconnected(clientid: string, reason?: string): void;
	hookAuth: Hook;
	hookAcl: Hook;
	hookConnected: Hook;
	hookDisconnected: Hook;
	mayHaveSubscribers(url: string): boolean;
	startEmbedded(): Promise<void>;
	stopEmbedded(): Promise<void>;
	closeEmbedded(match: (p: MqttPrincipal) => boolean): void;
};

export default workerService(
	{
		name: "preserver",
		port: WORKER_PORTS.preserver,
		checks(this: Svc) {
			const checks: Record<string, () => Promise<boolean>> = { cache: () => this.kv.ping() };
			if (!this.cfg.mqttUrl) checks["mqtt broker"] = async () => !!this.mqttServer?.listening && !this.aedes?.closed;
			return checks;
		},
	},
	{
		actions: {
			/** The embedded broker's address for the publisher; null when the platform uses MQTT_URL. */
			brokerUrl: {
				visibility: "public",
				handler(this: Svc) {
					return this.embeddedUrl ? { url: this.embeddedUrl } : null;
				},
			},
			/** MQTT connections this preserver knows of (embedded clients, and those the connect hooks reported). */
			clients: {
				visibility: "public",
				handler(this: Svc): MqttConnection[] {
					return [...(this.connections as Map<string, MqttConnection>).values()];
				},
			},
		},

		events: {
			"auth.session.revoked"(this: Svc, ctx: Context<{ session: string }>) {
				const session = ctx.params.session;
				this.authenticator.sessionRevoked(session);
				this.rememberRevoked(session);
				this.closeEmbedded((p: MqttPrincipal) => p.token?.session === session);
				void this.sweep();
			},
			"auth.apt.revoked"(this: Svc, ctx: Context<{ hash: string }>) {
				this.authenticator.aptRevoked(ctx.params.hash);
				this.closeEmbedded((p: MqttPrincipal) => !!p.aptHash && p.aptHash === ctx.params.hash);
				void this.sweep();
			},
			// A user's roles, groups or state changed: its holders' next sweep reads the user again (their messages are then
			// decided with the subjects it holds now), as a gateway's next request does.
			[USER_CHANGED](this: Svc, ctx: Context<{ ids: string[] }>) {
				this.authenticator.userChanged(ctx.params.ids);
				void this.sweep();
			},
			// This node's grant index is dropped (a preserver may run on a node without domain services) and, while token
			// holders are connected, loaded again at once: their next messages are decided with it.
			[AUTHORITY_CHANGED](this: Svc) {
				grantCache.invalidate();
				if (this.openByIdentity.size) void this.currentGrants().catch(() => undefined);
			},
		},

		created(this: Svc) {
			const cfg: PlatformConfig = configOf(this.broker);
			const keys = loadKeys(cfg);
			this.cfg = cfg;
			this.kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix) as KeyValue;
			this.authenticator = new Authenticator({
				jwt: new JwtKeys(keys.jwtSecret),
				aes: new Aes(keys.aesSecret),
				kv: this.kv,
				broker: this.broker,
				trustProxy: false,
				leewaySec: cfg.tokenLeewaySec,
			});
			this.publisherSecret = publisherPassword(keys.jwtSecret);
			this.bridgeSecret = bridgePassword(keys.jwtSecret);
			this.connections = new Map<string, MqttConnection>();
			this.revoked = new Set<string>();
			this.embeddedClients = new Map<string, AedesClient>();
			this.owners = new Map<string, string>();
			this.openByIdentity = new Map<string, Set<AedesClient>>();
			registerMetrics(this.broker);
		},

		async started(this: Svc) {
			const owners = acquireOwners(this.cfg);
			this.ownersHeld = true;
			await owners.ready;
			this.ownerStore = owners.store;
			if (!this.cfg.mqttUrl) await this.startEmbedded();
		},

		async stopped(this: Svc) {
			await this.stopEmbedded();
			if (this.ownersHeld) await releaseOwners(this.cfg);
			this.ownersHeld = false;
			this.ownerStore = undefined;
		},

		methods: {
			/** Login check shared by the HTTP hook and the embedded broker. */
			async login(this: Svc, username: unknown, password: unknown): Promise<MqttPrincipal | null> {
				const result = await this.verifyLogin(username, password);
				if (this.broker.isMetricsEnabled()) this.broker.metrics.increment(AUTH_TOTAL, { result: result ? "allow" : "deny" });
				return result;
			},

			async verifyLogin(this: Svc, username: unknown, password: unknown): Promise<MqttPrincipal | null> {
				if (typeof username !== "string" || !username || typeof password !== "string" || !password || password.length > 8192) return null;
				if (username === PUBLISHER_USERNAME) return safeEqual(password, this.publisherSecret) ? { username, publisher: true } : null;
				try {
					const { token } = await this.authenticator.authenticate({ headers: { authorization: `Bearer ${password}` } });
					if (identityOf(token) !== username) return null;
					return { username, identity: username, token, aptHash: password.startsWith("APT-") ? sha256Hex(password.slice(4)) : undefined };
				} catch {
					return null;
				}
			},

			/**
			 * May `p` use this client id? Yes when it owns it, or when nobody does yet (it becomes the owner). The owner
			 * is the identity (the username: uid, aid or cid; `$publisher` for the platform's publisher).
			 */
			async claimClientId(this: Svc, clientid: string, p: MqttPrincipal): Promise<boolean> {
				const identity = p.publisher ? PUBLISHER_USERNAME : p.identity;
				if (!identity) return false;
				const id = sha256Hex(`mqtt-client-id:${clientid}`);
				let owner: string | undefined = this.owners.get(id);
				if (!owner) {
					const store: DocumentStore = this.ownerStore!;
					const found = await store.findOne({ id });
					if (found) owner = String(found.identity);
					else {
						try {
							await store.insert({ id, identity, created_at: new Date().toISOString() });
							owner = identity;
						} catch (err) {
							if (!isDuplicateKeyError(err)) throw err;
							owner = String((await store.findOne({ id }))?.identity ?? "");
						}
					}
					if (this.owners.size >= MAX_OWNERS_CACHED) this.owners.clear();
					if (owner) this.owners.set(id, owner);
				}
				if (owner !== identity) this.logger.warn(`mqtt client id refused to ${identity}: it belongs to another identity`);
				return owner === identity;
			},

			/** Still valid: not expired, session not revoked (this node's broadcasts, the shared blacklist, the session record). */
			async stillValid(this: Svc, p: MqttPrincipal): Promise<boolean> {
				if (p.publisher) return true;
				const t = p.token;
				if (!t) return false;
				if (t.exp && t.exp * 1000 <= Date.now()) return false;
				if (t.session && (this.revoked.has(t.session) || (await this.authenticator.isRevoked(t.session)))) return false;
				return true;
			},

			async aclCheck(this: Svc, p: MqttPrincipal, action: unknown, topic: unknown, ip?: string): Promise<AclDecision> {
				let d: AclDecision;
				if (typeof topic !== "string" || (action !== "publish" && action !== "subscribe")) d = { allow: false, reason: "action must be publish or subscribe" };
				else if (!(await this.stillValid(p))) d = { allow: false, reason: "the token is no longer valid" };
				else if (action === "publish") d = authorizePublish(this.cfg.mqttTopicRoot, !!p.publisher, topic);
				else if (p.publisher || !p.token) d = { allow: false, reason: "the publisher does not subscribe" };
				else {
					const grants = await this.currentGrants();
					d = authorizeSubscribe({ root: this.cfg.mqttTopicRoot, token: p.token, filter: topic, grants, ip });
				}
				if (this.broker.isMetricsEnabled()) this.broker.metrics.increment(ACL_TOTAL, { action: String(action).slice(0, 16), result: d.allow ? "allow" : "deny" });
				if (!d.allow) this.logger.debug(`mqtt ${String(action)} ${String(topic)} by ${p.username} denied: ${d.reason}`);
				return d;
			},

			/** This node's grant index now (loaded when it was dropped), kept as the one forwards fall back to (see forward). */
			async currentGrants(this: Svc): Promise<GrantIndex> {
				const index = await grantCache.get(this.broker);
				this.grants = index;
				return index;
			},

			/**
			 * The message `packet` as token holder `client` may receive it now (./preserver/forward.ts), or null: not
			 * delivered. Decided with the node's grant index when it is loaded, else with the last one this preserver
			 * loaded: every message entering the broker waited for a current one (authorizePublish), so only a message
			 * already on its way when a change arrives can be decided with the index of before the change, as a request
			 * answered during the change is. No index at all: not delivered.
			 */
			forward(this: Svc, client: AedesClient, p: MqttPrincipal, packet: { topic: string; payload: Buffer }): Buffer | null {
				const index: GrantIndex | undefined = grantCache.loaded() ?? this.grants;
				let payload: Buffer | null = null;
				if (index && p.token) {
					const views: ForwardViews = (marked(client)[VIEWS] ??= new ForwardViews(this.cfg.mqttTopicRoot, marked(client)[PEER]));
					try {
						payload = views.payloadFor(p.token, index, packet.topic, packet.payload);
					} catch (err) {
						this.logger.warn(`mqtt message on ${packet.topic} withheld from ${p.username}: ${(err as Error).message}`);
					}
				}
				if (this.broker.isMetricsEnabled()) this.broker.metrics.increment(FORWARD_TOTAL, { result: !payload ? "withheld" : payload === packet.payload ? "whole" : "narrowed" });
				return payload;
			},

			/**
			 * Each token holder of the embedded broker, authenticated again with the password it logged in with, as a
			 * request would be (expiry, revocation, logout, a deactivated user's closed sessions): a refusal closes the
			 * connection; an accepted token becomes the one its messages are decided with.
			 */
			sweep(this: Svc): Promise<void[]> {
				const clients = [...(this.openByIdentity as Map<string, Set<AedesClient>>).values()].flatMap((set) => [...set]);
				return Promise.all(clients.map((c) => this.recheck(c)));
			},

			/** One holder's check; skipped while its previous one is still under way (one slow answer holds no other). */
			async recheck(this: Svc, client: AedesClient): Promise<void> {
				const p: MqttPrincipal | undefined = marked(client)[PRINCIPAL];
				if (!p || p.publisher || client.closed || marked(client)[CHECKING]) return;
				marked(client)[CHECKING] = true;
				try {
					const { token } = await this.authenticator.authenticate({ headers: { authorization: `Bearer ${marked(client)[BEARER] ?? ""}` } });
					p.token = token;
				} catch (err) {
					const code = (err as { code?: unknown })?.code;
					// A refusal ends the connection; an outage (the identity service unreachable) is asked again next sweep.
					if (code !== 401 && code !== 403) return;
					this.logger.info(`mqtt client ${client.id} (${p.username}) disconnected: ${(err as Error).message}`);
					client.close();
				} finally {
					marked(client)[CHECKING] = false;
				}
			},

			rememberRevoked(this: Svc, session: string) {
				if (this.revoked.size >= MAX_RECORDS) this.revoked.clear();
				this.revoked.add(session);
			},

			recordConnected(this: Svc, c: MqttConnection) {
				if (this.connections.size >= MAX_RECORDS) this.connections.delete(this.connections.keys().next().value!);
				this.connections.set(c.clientid, c);
				if (this.broker.isMetricsEnabled()) this.broker.metrics.set(CLIENTS, this.connections.size);
				this.logger.info(`mqtt client ${c.clientid} connected (${c.username}, ${c.via}${c.peerhost ? `, ${c.peerhost}` : ""})`);
			},

			recordDisconnected(this: Svc, clientid: string, reason?: string) {
				const c = this.connections.get(clientid);
				this.connections.delete(clientid);
				if (this.broker.isMetricsEnabled()) this.broker.metrics.set(CLIENTS, this.connections.size);
				this.logger.info(`mqtt client ${clientid} disconnected${c ? ` (${c.username})` : ""}${reason ? `: ${reason}` : ""}`);
			},

			// ---------------------------------------------------------------------------------------------------
			// EMQX-style HTTP hooks (served on the ops port through the ops-port mixin's `opsRoute`)
			// ---------------------------------------------------------------------------------------------------

			async opsRoute(this: Svc, req: IncomingMessage, res: ServerResponse): Promise<boolean> {
				const path = (req.url ?? "/").split("?")[0];
				if (!["/mqtt/auth", "/mqtt/acl", "/mqtt/connected", "/mqtt/disconnected"].includes(path)) return false;
				if (req.method !== "POST") {
					res.setHeader("Allow", "POST");
					reply(res, 405, { statusCode: 405, message: `${req.method} is not allowed on ${path}`, error: "Method Not Allowed" });
					return true;
				}
				const body = await readBody(req);
				// A malformed auth or ACL request is a deny, never an error an external broker could treat as "ignore".
				if (path === "/mqtt/auth") reply(res, 200, await this.hookAuth(body ?? {}));
				else if (path === "/mqtt/acl") reply(res, 200, await this.hookAcl(body ?? {}));
				else if (!body) reply(res, 400, { statusCode: 400, message: "body must be a JSON object", error: "Bad Request" });
				else if (path === "/mqtt/connected") reply(res, 200, await this.hookConnected(body));
				else reply(res, 200, await this.hookDisconnected(body));
				return true;
			},

			/** `{clientid, username, password}` → `{result: allow|deny, is_superuser: false}`; remembers the principal. */
			async hookAuth(this: Svc, b: Record<string, unknown>) {
				const clientid = str(b.clientid);
				const p: MqttPrincipal | null = clientid ? await this.login(b.username, b.password) : null;
				if (!p) return { result: "deny", is_superuser: false };
				// Another identity's client id: refused, and the owner's remembered login is left as it is.
				if (!(await this.claimClientId(clientid!, p).catch(() => false))) return { result: "deny", is_superuser: false };
				// Kept as long as the token lives (a day for the publisher or a token without `exp`).
				const exp = p.token?.exp;
				const ttl = p.publisher || !exp ? PUBLISHER_TTL_MS : Math.max(1000, exp * 1000 - Date.now());
				await this.kv.set(clientKey(clientid!), JSON.stringify(p), ttl);
				return { result: "allow", is_superuser: false };
			},

			/** `{clientid, username, topic, action}` → `{result}`: the principal of that client's login, checked again. */
			async hookAcl(this: Svc, b: Record<string, unknown>) {
				const clientid = str(b.clientid);
				const username = str(b.username);
				const raw = clientid ? await this.kv.get(clientKey(clientid)) : null;
				const p: MqttPrincipal | null = raw ? JSON.parse(raw) : null;
				if (!p || !username || p.username !== username) return { result: "deny" };
				const d: AclDecision = await this.aclCheck(p, b.action, b.topic, str(b.peerhost));
				return { result: d.allow ? "allow" : "deny" };
			},

			async hookConnected(this: Svc, b: Record<string, unknown>) {
				const clientid = str(b.clientid);
				if (!clientid) return { result: "ignored" };
				this.recordConnected({ clientid, username: str(b.username) ?? "", via: "hooks", peerhost: str(b.peerhost), connected_at: new Date().toISOString() });
				return { result: "ok" };
			},

			async hookDisconnected(this: Svc, b: Record<string, unknown>) {
				const clientid = str(b.clientid);
				if (!clientid) return { result: "ignored" };
				this.recordDisconnected(clientid, str(b.reason));
				await this.kv.del(clientKey(clientid));
				return { result: "ok" };
			},

			// ---------------------------------------------------------------------------------------------------
			// Embedded broker (no MQTT_URL)
			// ---------------------------------------------------------------------------------------------------

			/**
			 * Whether a change published to the embedded broker at `url` could reach anyone: false only while no token
			 * holder has been admitted since that broker started. Its sessions live in memory (aedes' default
			 * persistence), so until then it holds no subscription at all, online or offline, and a message would go
			 * nowhere. True for any other broker (MQTT_URL, another node's): that one cannot be known from here.
			 */
			mayHaveSubscribers(this: Svc, url: string): boolean {
				return !this.embeddedUrl || url !== this.embeddedUrl || this.holderAdmitted !== false;
			},

			async startEmbedded(this: Svc) {
				// A new broker starts with no session (memory persistence); set before it accepts anyone.
				this.holderAdmitted = false;
				const aedes = await Aedes.createBroker({ id: `preserver-${this.broker.nodeID}`, connectTimeout: MQTT_PREAUTH.connectTimeoutMs, drainTimeout: 30_000 });
				const refuse = (done: (err: AuthenticateError | null, ok: boolean) => void, message: string) =>
					done(Object.assign(new Error(message), { returnCode: 5 }) as AuthenticateError, false);
				aedes.authenticate = (client, username, password, done) => {
					/** The principal admitted, or why the connection is refused (CONNACK 5). */
					const admit = async (): Promise<MqttPrincipal | string> => {
						const p: MqttPrincipal | null = await this.login(username, password?.toString("utf8"));
						if (!p) return "not authorized";
						// Its queued messages (a session with `clean: false`) are decided as it connects: with a current index.
						if (!p.publisher) await this.currentGrants();
						// A client id belongs to the identity that first used it: another identity is refused before aedes
						// would take over the owner's session (and drop its live connection).
						if (!(await this.claimClientId(client.id, p))) return "client id belongs to another identity";
						if (!p.publisher) {
							// Checked and counted in one synchronous step, so concurrent logins cannot pass the limit together.
							const open: Set<AedesClient> = this.openByIdentity.get(p.identity!) ?? new Set();
							// The same client id reconnecting replaces its own connection: not counted twice.
							const others = [...open].filter((c) => c !== client && c.id !== client.id);
							if (others.length >= MQTT_MAX_CONNECTIONS) return `at most ${MQTT_MAX_CONNECTIONS} connections per identity`;
							open.add(client);
							this.openByIdentity.set(p.identity!, open);
							// From now on this broker may hold subscriptions (also of sessions gone offline).
							this.holderAdmitted = true;
						}
						return p;
					};
					admit().then(
						(r) => {
							if (typeof r === "string") return refuse(done, r);
							marked(client)[PRINCIPAL] = r;
							if (!r.publisher) marked(client)[BEARER] = password?.toString("utf8");
							marked(client)[PREAUTH]?.();
							done(null, true);
						},
						// A store that does not answer: "server unavailable", the client may retry.
						() => done(Object.assign(new Error("server unavailable"), { returnCode: 3 }) as AuthenticateError, false),
					);
				};
				aedes.authorizeSubscribe = (client, sub, done) => {
					const p: MqttPrincipal | undefined = (client as Marked | null)?.[PRINCIPAL];
					if (!p) return done(null, null);
					this.aclCheck(p, "subscribe", sub.topic, marked(client)[PEER]).then(
						(d: AclDecision) => done(null, d.allow ? sub : null),
						() => done(null, null),
					);
				};
				aedes.authorizePublish = (client, packet, done) => {
					const p: MqttPrincipal | undefined = (client as Marked | null)?.[PRINCIPAL];
					// `client` is null only for an orphaned will; wills of token holders are refused anyway.
					if (!p) return done(new Error("publish denied"));
					// A message enters the broker once this node's grant index is current: its deliveries are decided with it.
					Promise.all([this.aclCheck(p, "publish", packet.topic), p.publisher ? this.currentGrants() : undefined]).then(
						([d]: [AclDecision, unknown]) => done(d.allow ? null : new Error("publish denied")),
						() => done(new Error("publish denied")),
					);
				};
				aedes.authorizeForward = (client, packet) => {
					const p: MqttPrincipal | undefined = (client as Marked | null)?.[PRINCIPAL];
					const t = p?.token;
					// Expired or revoked since it subscribed: nothing more is delivered, and the connection goes.
					if (!p || p.publisher || !t || (t.exp && t.exp * 1000 <= Date.now()) || (t.session && this.revoked.has(t.session))) {
						setImmediate(() => client.close());
						return null;
					}
					// aedes types a payload as a string or bytes; what reaches a subscriber from the wire or the publisher is bytes.
					const payload = this.forward(client, p, { topic: packet.topic, payload: Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload) });
					if (!payload) return null;
					// Changed in place: aedes gives each delivery a packet of its own (per subscription, per queued message),
					// and its queue of a returning session writes that packet rather than the one returned here.
					packet.payload = payload;
					return packet;
				};
				aedes.on("clientReady", (client) => {
					this.embeddedClients.set(client.id, client);
					const p: MqttPrincipal | undefined = marked(client)[PRINCIPAL];
					this.recordConnected({
						clientid: client.id,
						username: p?.username ?? "",
						via: marked(client)[BRIDGED] ? "websocket" : "embedded",
						peerhost: marked(client)[PEER],
						connected_at: new Date().toISOString(),
					});
				});
				aedes.on("clientDisconnect", (client) => {
					if (this.embeddedClients.get(client.id) === client) this.embeddedClients.delete(client.id);
					this.recordDisconnected(client.id);
				});
				aedes.on("clientError", (client, err) => this.logger.debug(`mqtt client ${client?.id} error: ${err.message}`));
				const preAuth = new PreAuthGate();
				const serve = (socket: net.Socket, peer: string | undefined, release: () => void, bridged: boolean) => {
					const client = aedes.handle(socket);
					marked(client)[PREAUTH] = release;
					marked(client)[PEER] = peer;
					marked(client)[BRIDGED] = bridged;
					if (!limitPacketSize(client, socket)) this.logger.error("preserver: the aedes packet parser is not where expected; MQTT connection refused (packet size limit)");
					// Counted per identity until the socket is gone, whatever ended it.
					socket.once("close", () => {
						const p: MqttPrincipal | undefined = marked(client)[PRINCIPAL];
						const open: Set<AedesClient> | undefined = p?.identity ? this.openByIdentity.get(p.identity) : undefined;
						if (!open) return;
						open.delete(client);
						if (!open.size) this.openByIdentity.delete(p!.identity!);
					});
				};
				const server = net.createServer((socket) => {
					// Unauthenticated connections are capped in all and per address: beyond, closed before anything is read.
					const release = preAuth.admit(socket.remoteAddress);
					if (!release) return void socket.destroy();
					socket.once("close", release);
					socket.on("error", () => undefined); // aedes reports them once it has the socket
					// The CONNECT's deadline counts from here, through a bridge's preamble (aedes' own starts at handle).
					const deadline = setTimeout(() => socket.destroy(), MQTT_PREAUTH.connectTimeoutMs);
					socket.once("close", () => clearTimeout(deadline));
					const authenticated = (slot: () => void) => () => (clearTimeout(deadline), slot());
					// The gateway's WebSocket bridge names the browser's address first: the connection moves to that address's
					// count (and its grants see that address); the same caps apply there.
					void readBridgePreamble(socket, this.bridgeSecret).then((peer) => {
						if (peer === undefined) return serve(socket, socket.remoteAddress, authenticated(release), false);
						release();
						const moved = peer && !socket.destroyed ? preAuth.admit(peer) : null;
						if (!peer || !moved) return void socket.destroy();
						socket.once("close", moved);
						socket.write(Buffer.from([BRIDGE_ACK]));
						serve(socket, peer, authenticated(moved), true);
					});
				});
				await new Promise<void>((resolve, reject) => {
					server.once("error", reject);
					server.listen(this.cfg.mqttPort, this.cfg.host, () => {
						server.off("error", reject);
						resolve();
					});
				}).catch(async (err: NodeJS.ErrnoException) => {
					await new Promise<void>((r) => aedes.close(() => r()));
					throw new Error(`preserver: cannot serve the embedded MQTT broker on ${this.cfg.host}:${this.cfg.mqttPort} (${err.code ?? err.message}); set MQTT_PORT or MQTT_URL`);
				});
				const port = (server.address() as AddressInfo).port;
				const host = ["0.0.0.0", "::", ""].includes(this.cfg.host) ? "127.0.0.1" : this.cfg.host;
				this.aedes = aedes;
				this.mqttServer = server;
				this.sweepTimer = setInterval(() => void this.sweep(), MQTT_SWEEP_MS);
				this.sweepTimer.unref();
				this.embeddedUrl = `mqtt://${host.includes(":") ? `[${host}]` : host}:${port}`;
				this.logger.info(`preserver: embedded MQTT broker on ${this.embeddedUrl}`);
			},

			async stopEmbedded(this: Svc) {
				const aedes = this.aedes as Aedes | undefined;
				const server = this.mqttServer as net.Server | undefined;
				this.aedes = undefined;
				this.mqttServer = undefined;
				this.embeddedUrl = undefined;
				this.holderAdmitted = undefined;
				clearInterval(this.sweepTimer);
				this.sweepTimer = undefined;
				if (aedes) await new Promise<void>((r) => aedes.close(() => r()));
				if (server?.listening) await new Promise<void>((r) => server.close(() => r()));
				this.embeddedClients.clear();
				this.openByIdentity.clear();
			},

			/** Closes the embedded broker's connections whose principal matches (revocation). */
			closeEmbedded(this: Svc, match: (p: MqttPrincipal) => boolean) {
				for (const client of (this.embeddedClients as Map<string, AedesClient>).values()) {
					const p: MqttPrincipal | undefined = marked(client)[PRINCIPAL];
					if (p && match(p)) client.close();
				}
			},
		},
	},
);
