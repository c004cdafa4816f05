/**
 * The MQTT side of change events (docs/mqtt.md): the topic scheme the publisher writes, and the rules the preserver
 * applies to every MQTT client (EMQX-style HTTP hooks and the embedded aedes broker alike). Pure: no broker, no
 * I/O; the grant index and the token come from the caller. `<root>` is MQTT_TOPIC_ROOT (validated in runtime/config.ts).
 *
 *   <root>/owner/<owner>/<service>/<collection>/<id>    the document's owner (uid, aid or cid)
 *   <root>/share/<uid>/<service>/<collection>/<id>      each id in the document's `shares`
 *   <root>/client/<cid>/<service>/<collection>/<id>     each client id in the document's `clients`
 */
import { createHmac } from "crypto";
import { isIP } from "net";
import { COLLECTIONS, type CollectionRef } from "../catalog";
import { safeEqual } from "./crypto";
import { expandIpv6, normalizeIp } from "./cidr";
import type { GrantIndex } from "./grants";
import { hasScope } from "./scopes";
import { identityOf, type TokenClaims } from "./types";

export type TopicKind = "owner" | "share" | "client";
const KINDS: readonly TopicKind[] = ["owner", "share", "client"];

/** The publisher's own MQTT login (never a token identity: those are ids without `$`). */
export const PUBLISHER_USERNAME = "$publisher";

/** The publisher's password: derived from the deployment's JWT secret, so every node of a deployment agrees. */
export function publisherPassword(jwtSecret: string): string {
	return createHmac("sha256", jwtSecret).update("mqtt:publisher").digest("base64url");
}

/**
 * What a connection to the embedded broker may cost before it is authenticated (docs/mqtt.md, "Limits"): at most
 * `maxConnections` such connections at once, `maxPerIp` of them from one IPv4 address or IPv6 /64 (beyond either cap a
 * new connection is closed at once, before anything is read); each may send `maxBytes` before its login is accepted
 * (a CONNECT with a token is a few KiB; one announcing more is closed at its fixed header) and must have sent its
 * CONNECT within `connectTimeoutMs`. Worst case held by unauthenticated connections: maxConnections x maxBytes (16 MiB).
 */
export const MQTT_PREAUTH = { maxConnections: 1024, maxPerIp: 32, maxBytes: 16 * 1024, connectTimeoutMs: 5_000 } as const;

/** Largest MQTT packet the embedded broker reads from a token holder (before authentication: MQTT_PREAUTH.maxBytes in all). */
export const MQTT_MAX_PACKET = 1024 * 1024;

/**
 * The gateway's MQTT-over-WebSocket bridge (services/api/mqtt-ws.ts) opens one TCP connection to the embedded broker
 * per WebSocket and, before any MQTT byte, sends one line naming the browser's address:
 * `\0PLATFORM-WS <bridgePassword> <ip>\n` (at most BRIDGE_PREAMBLE_MAX bytes; a first byte 0 is never MQTT: packet
 * type 0 is reserved). The broker checks the password, counts the connection under that address instead of the
 * gateway's (MQTT_PREAUTH's per-address cap, the grants' IP conditions) and answers BRIDGE_ACK before any MQTT byte.
 * The password is derived from JWT_SECRET like the publisher's, so every node of a deployment agrees.
 */
export const BRIDGE_PREAMBLE_MAX = 256;
export const BRIDGE_ACK = 0;
const BRIDGE_WORD = "PLATFORM-WS";

export function bridgePassword(jwtSecret: string): string {
	return createHmac("sha256", jwtSecret).update("mqtt:websocket-bridge").digest("base64url");
}

export function bridgePreamble(password: string, ip: string): Buffer {
	return Buffer.from(`\0${BRIDGE_WORD} ${password} ${ip}\n`, "latin1");
}

/**
 * The address a bridge preamble names, or null when `line` (without its `\0` and `\n`) is not a preamble with
 * `password` and an IP address.
 */
export function parseBridgePreamble(line: string, password: string): string | null {
	const [word, pw, ip, ...rest] = line.split(" ");
	if (word !== BRIDGE_WORD || rest.length || typeof pw !== "string" || !safeEqual(pw, password) || !ip || !isIP(ip)) return null;
	return ip;
}

/** The key a connection's address counts under: the IPv4 address, or the /64 of an IPv6 one (one host's usual share). */
export function preAuthKey(address: string | undefined): string {
	const ip = normalizeIp(address ?? "");
	const groups = isIP(ip) === 6 ? expandIpv6(ip) : undefined;
	return groups
		? `${groups
				.slice(0, 4)
				.map((g) => g.toString(16))
				.join(":")}::/64`
		: ip;
}

/** Counts the connections not yet authenticated, in all and per address (preAuthKey), against MQTT_PREAUTH's caps. */
export class PreAuthGate {
	private total = 0;
	private readonly byKey = new Map<string, number>();
	constructor(private readonly caps: { maxConnections: number; maxPerIp: number } = MQTT_PREAUTH) {}

	/** A slot for a new connection from `address`, as its release (idempotent); null when a cap is reached: refuse it. */
	admit(address: string | undefined): (() => void) | null {
		const key = preAuthKey(address);
		const n = this.byKey.get(key) ?? 0;
		if (this.total >= this.caps.maxConnections || n >= this.caps.maxPerIp) return null;
		this.total++;
		this.byKey.set(key, n + 1);
		let held = true;
		return () => {
			if (!held) return;
			held = false;
			this.total--;
			const left = (this.byKey.get(key) ?? 1) - 1;
			if (left > 0) this.byKey.set(key, left);
			else this.byKey.delete(key);
		};
	}

	get size(): number {
		return this.total;
	}
}

/** One topic level taken from data (an id): not empty, no separator or wildcard, bounded. */
export function safeLevel(v: unknown): v is string {
	return typeof v === "string" && v.length > 0 && v.length <= 200 && !/[/+#\u0000]/.test(v);
}

export function changeTopic(root: string, kind: TopicKind, subject: string, service: string, collection: string, id: string): string {
	return `${root}/${kind}/${subject}/${service}/${collection}/${id}`;
}

export interface ChangeTarget {
	event: { id: string; source: { db: string; collection: string } };
	owner?: string;
	shares?: string[];
	clients: string[];
}

/** Every topic one change goes to: the owner's, each share's, each client's (ids unusable as a level are skipped). */
export function changeTopics(root: string, rec: ChangeTarget): string[] {
	const { id, source } = rec.event;
	if (![id, source?.db, source?.collection].every(safeLevel)) return [];
	const out = new Set<string>();
	const add = (kind: TopicKind, subject: unknown) => {
		if (safeLevel(subject)) out.add(changeTopic(root, kind, subject, source.db, source.collection, id));
	};
	add("owner", rec.owner);
	for (const s of rec.shares ?? []) add("share", s);
	for (const c of rec.clients ?? []) add("client", c);
	return [...out];
}

/** A topic filter (or name) split into levels; null when wildcards are misplaced (`#` not last, `+`/`#` inside a level). */
export function filterLevels(filter: string): string[] | null {
	if (typeof filter !== "string" || !filter.length || filter.length > 1024 || filter.includes("\u0000")) return null;
	const levels = filter.split("/");
	for (let i = 0; i < levels.length; i++) {
		const l = levels[i];
		if (l.includes("#") && (l !== "#" || i !== levels.length - 1)) return null;
		if (l.includes("+") && l !== "+") return null;
	}
	return levels;
}

const wild = (l: string | undefined) => l === undefined || l === "+" || l === "#";

/** Does one level of a filter match a literal value? `#` (or the filter ending before it) matches everything below. */
function levelMatches(level: string | undefined, value: string, ended: boolean): boolean {
	if (ended) return true;
	return level === "+" || level === "#" || level === value;
}

export type AclDecision = { allow: true } | { allow: false; reason: string };
const deny = (reason: string): AclDecision => ({ allow: false, reason });
const ALLOW: AclDecision = { allow: true };

export interface SubscribeCheck {
	root: string;
	token: TokenClaims;
	filter: string;
	/** The node's grant index (every grant plus the RBAC expansion). */
	grants: GrantIndex;
	ip?: string;
}

/**
 * May this token subscribe to this filter? Only under its own identity's owner and share topics and its own
 * client's topics, and only for collections it may read without restriction: scope `read:<service>:<collection>`
 * and a read grant with no field allowlist and no row filter (an MQTT message carries the whole document, so a
 * narrower grant is for the REST API only). A wildcard at the service or collection level is allowed only when
 * every collection it can match passes. Shared subscriptions (`$share/...`) and anything else are refused.
 */
export function authorizeSubscribe(c: SubscribeCheck): AclDecision {
	const levels = filterLevels(c.filter);
	if (!levels) return deny("malformed topic filter");
	const rootLevels = c.root.split("/");
	for (let i = 0; i < rootLevels.length; i++) if (levels[i] !== rootLevels[i]) return deny("topic is outside the platform's topics");
	const [kind, subject, service, collection] = levels.slice(rootLevels.length);
	if (!KINDS.includes(kind as TopicKind)) return deny("unknown topic kind");
	const mine = kind === "client" ? c.token.cid : identityOf(c.token);
	if (!mine || subject !== mine) return deny(`${kind} topics are those of the token's own ${kind === "client" ? "client" : "identity"}`);
	if (service === undefined) return deny("a subscription names a service and a collection");
	// `#` at the service level also ends everything below it.
	const serviceEnded = service === "#";
	const collectionEnded = serviceEnded || collection === "#";
	if (!serviceEnded && collection === undefined) return deny("a subscription names a service and a collection");
	const candidates: CollectionRef[] = COLLECTIONS.filter((r) => levelMatches(service, r.domain.name, serviceEnded) && levelMatches(collection, r.collection.name, collectionEnded));
	if (!candidates.length) return deny("no such collection");
	for (const r of candidates) {
		const why = readableWhole(c, r.domain.name, r.collection.name);
		if (why) return deny(wild(service) || wild(collection) ? `${why} (the wildcard covers ${r.path})` : why);
	}
	return ALLOW;
}

/** Null when the token may read every document of the collection it can see (scope + unrestricted grant). */
function readableWhole(c: SubscribeCheck, service: string, collection: string): string | null {
	if (!hasScope(c.token.scope ?? "", `read:${service}:${collection}`)) return `token scope does not cover read:${service}:${collection}`;
	const subjects = c.token.subject ? c.token.subject.split(" ").filter(Boolean) : [];
	const d = c.grants.decide({ subjects, action: "read", object: `${service}:${collection}`, ip: c.ip, tz: c.token.tz, token: c.token });
	if (!d.granted) return `no grant for read on ${service}:${collection}`;
	if (d.fields !== null || d.rowFilter !== null) return `the read grant on ${service}:${collection} is restricted (fields or filter)`;
	return null;
}

/** Publishing: only the platform's publisher, and only under the root; token holders never publish. */
export function authorizePublish(root: string, publisher: boolean, topic: string): AclDecision {
	const levels = filterLevels(topic);
	if (!levels || levels.some((l) => l === "+" || l === "#")) return deny("malformed topic");
	if (!publisher) return deny("clients do not publish");
	return topic.startsWith(`${root}/`) ? ALLOW : deny("topic is outside the platform's topics");
}

/**
 * The message body: the change event as the webhooks carry it (secret and write-only fields are already stripped by
 * the outbox), minus the webhook credentials a CQRS configuration keeps in its free-form `value`.
 */
export function mqttPayload(event: { topic?: string; after?: Record<string, unknown>; before?: Record<string, unknown> }): string {
	if (event.topic !== "context.configs") return JSON.stringify(event);
	const scrub = (d: Record<string, unknown> | undefined) => {
		if (!d || !d.value || typeof d.value !== "object" || Array.isArray(d.value)) return d;
		const { secret: _s, authorization: _a, ...value } = d.value as Record<string, unknown>;
		return { ...d, value };
	};
	return JSON.stringify({ ...event, ...(event.after ? { after: scrub(event.after) } : {}), ...(event.before ? { before: scrub(event.before) } : {}) });
}
