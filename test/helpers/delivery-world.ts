/**
 * The world of the delivery-path matrix (test/integration/delivery-paths.test.ts): the two tenants of
 * test/helpers/tenants.ts with documents that carry markers (an id and field values that belong to one document
 * only), the principals that read them and what each may see of them, bursts of writes, the receivers that collect
 * what a principal is handed through one path, and the principals whose rights the revocation phase takes away.
 *
 * What a principal may see is modelled, not asked of the platform: `reach` says, per collection, which fields and which
 * rows of its own tenant it may read (test/integration/delivery-paths.test.ts compares every received text with it).
 */
import http from "http";
import { createECDH, randomBytes } from "crypto";
import mqtt, { type MqttClient } from "mqtt";
import { SMTPServer } from "smtp-server";
import { bootTenancy, ok, type Doc, type Tenancy, type Tenant } from "./tenants";
import { openStream, type LiveStream } from "./live-sse";
import { payloadOf } from "./auth";
import { sleep, waitForValue } from "./wait";
import { walletIdOf, WALLET_CURRENCY } from "../../services/financial.service";
import { embeddedStream, OutboxStream, type Consumer } from "../../events/stream";
import { sharedOutbox } from "../../events/outbox";

export type TenantName = "a" | "b";
export const TENANTS: TenantName[] = ["a", "b"];
export const other = (t: TenantName): TenantName => (t === "a" ? "b" : "a");
/** Every zone: a principal's widest view, so that whatever lies outside it is outside every view it can ask for. */
export const ALL_ZONES = "own,share,group,client";
/** The tag the `limited` principals' row filters admit. */
export const LIMITED_TAG = "limited";
/** The word every post holds, searched by the search row. */
export const SEARCH_WORD = "matrixword";
const ID = /[0-9a-f]{24}/g;

/** A document planted for the matrix: its id and field values are found nowhere else. */
export interface Marker {
	tenant: TenantName;
	/** `service/collection` */
	col: string;
	id: string;
	/** Field → a value unique to this document (what a reader of that field receives). */
	fields: Record<string, string>;
	tags: string[];
	/** Values the document held before a later change of it: never served by a path that serves current states. */
	stale: string[];
}

/** What a principal may read of one collection of its tenant: every field unless `fields`, every row unless `rows`. */
export interface Reach {
	fields?: string[];
	rows?: (m: Marker) => boolean;
}

export interface Principal {
	/** `a.admin`, `a.limited`, `a.tenant` (a tenant's webhook), `a.rv-grant` ... */
	key: string;
	tenant: TenantName;
	/** A user holding a bearer, or a tenant (its webhook: no bearer). */
	kind: "user" | "tenant";
	/** The MQTT username (the token's identity); the client id for a tenant. */
	id: string;
	/** The bearer (a JWT or an APT). */
	token: string;
	cid: string;
	/** What it may read, by collection (`*`: every collection); a collection absent: nothing. */
	reach: Record<string, Reach>;
}

/** One answer or frame batch a principal received, with what it answered (a failure names it). */
export interface Piece {
	what: string;
	text: string;
}

/** What one principal receives through one path. */
export interface Receiver {
	/**
	 * What arrived since the last take (streams, subscriptions, mailboxes) or what a request answers now. `proof`, when
	 * given, is waited for (bounded: a path that never delivers it fails on its absence, not on a timeout here).
	 */
	take(proof?: string): Promise<Piece[]>;
	/** Drops what arrived so far (streams, subscriptions, mailboxes): the next take hands only what comes after. */
	skip?(): Promise<void>;
	close(): Promise<void>;
}

const FULL: Reach = {};
const limitedRows = (m: Marker) => m.tags.includes(LIMITED_TAG);
/** The `limited` principals' grants (given by their tenant's admin), as reach. */
export const LIMITED_REACH: Record<string, Reach> = {
	"content/notes": { fields: ["title"], rows: limitedRows },
	"content/posts": { fields: ["title"], rows: limitedRows },
	"thing/sensors": FULL,
	"thing/devices": { fields: ["name"] },
	"auth/grants": { rows: limitedRows },
};

/** Change kinds of the revocation phase, each applied to a principal of its own (tenant a) or to tenant b's webhook. */
export const CHANGES = ["grant removed", "grant narrowed", "role removed", "logout", "APT revoked", "webhook config removed"] as const;
export type ChangeKind = (typeof CHANGES)[number];
export const USER_CHANGES: ChangeKind[] = ["grant removed", "grant narrowed", "role removed", "logout", "APT revoked"];
/** Whom each change is made to: a principal holding a bearer, or a tenant (its webhook). */
export const CHANGE_TO: Record<ChangeKind, "user" | "tenant"> = {
	"grant removed": "user",
	"grant narrowed": "user",
	"role removed": "user",
	logout: "user",
	"APT revoked": "user",
	"webhook config removed": "tenant",
};

/** The grants each revocation principal holds (on itself, or on its role for `role removed`), and how narrowing cuts them. */
const RV_GRANTS: Array<{ action: string; object: string; narrow?: { field: string[]; filter?: Doc } }> = [
	{ action: "manage", object: "content:notes", narrow: { field: ["title"], filter: { tags: LIMITED_TAG } } },
	{ action: "search", object: "content:posts", narrow: { field: ["title"], filter: { tags: LIMITED_TAG } } },
	{ action: "read", object: "special:files", narrow: { field: ["name"], filter: { tags: LIMITED_TAG } } },
	{ action: "upload", object: "special:files" },
	{ action: "read", object: "thing:sensors", narrow: { field: ["name", "device"] } },
	{ action: "read", object: "thing:devices", narrow: { field: ["name"] } },
	{ action: "resolve", object: "logistic:locations", narrow: { field: ["name"] } },
	{ action: "manage", object: "touch:emails" },
];
const UNNARROWED = "unnarrowed";
/** The reach a narrowed revocation principal keeps. */
const NARROWED_REACH: Record<string, Reach> = {
	"content/notes": { fields: ["title"], rows: limitedRows },
	"content/posts": { fields: ["title"], rows: limitedRows },
	"special/files": { fields: ["name"], rows: limitedRows },
	"thing/sensors": { fields: ["name", "device"] },
	"thing/devices": { fields: ["name"] },
	"logistic/locations": { fields: ["name"] },
	"touch/emails": FULL,
	/** The grants narrowing leaves as they were. */
	"auth/grants": { rows: (m) => m.tags.includes(UNNARROWED) },
};

/** A revocation principal: who it is, what it holds, and how its change is made. */
export interface Revoked {
	kind: ChangeKind;
	p: Principal;
	user: { id: string; username: string; password: string; jwt: string; subject: string };
	/** Its grants as /auth/can presents them (the first: manage on content:notes). */
	grants: string[];
	/** Its own file (tenant a), uploaded at the start. */
	file: Marker;
	/** Makes the change; resolves once the platform answered it. */
	apply(): Promise<void>;
}

export interface World {
	t: Tenancy;
	url: string;
	principals: Principal[];
	byKey: Map<string, Principal>;
	markers: Marker[];
	/** Values no path may ever hand anyone: passwords, webhook credentials, an APT. */
	secrets: string[];
	/** Foreign ids a tenant wrote into its own documents itself (a sensor naming the other tenant's device). */
	known: Record<TenantName, Set<string>>;
	/** What each tenant planted for the rows that name documents by id. */
	planted: Record<TenantName, Planted>;
	/** The last open note of each tenant (every principal of the tenant may read its title). */
	settleNote: Record<TenantName, Marker | undefined>;
	/**
	 * The documents of `col` a path that names documents one by one asks about: the planted ones and those of the last
	 * two bursts, of both tenants (every kind of document: open, closed, replaced, of either tenant, in few requests).
	 */
	probes(col: string): Marker[];
	revoked: Map<ChangeKind, Revoked>;
	/** Webhook bodies per tenant (its CQRS config's receiver). */
	hooks: Record<TenantName, Piece[]>;
	/** Raw mails the SMTP sink received. */
	mails: string[];
	mqttUrl: string;
	wsUrl: string;
	/** A request as a principal (its bearer, every zone); the ids the request names are blanked in the answer. */
	call(p: Principal, method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<Piece>;
	/** New documents (and a patch that leaves a stale value) in both tenants; the last one is each tenant's open note. */
	burst(label: string): Promise<void>;
	/** A few documents in both tenants, for the windows of the live cursor's catch-up. */
	windowWrites(label: string): Promise<void>;
	/** Every consumer of the change stream has handled every write, and the witnesses saw each tenant's last note. */
	settle(): Promise<void>;
	/** The change stream's consumer groups the platform started. */
	groups(): string[];
	/** Holds `/cursor?live=true` requests with `x-matrix-gate: <id>` after their start position is taken. */
	gate(id: string): { reached: Promise<void>; release(): void };
	/** Opens an SSE stream as a principal. */
	stream(p: Principal, pathAndQuery: string, headers?: Record<string, string>): Promise<LiveStream>;
	close(): Promise<void>;
}

export interface Planted {
	openNote: Marker;
	closedNote: Marker;
	file: Marker;
	device: Marker;
	sensors: Marker[];
	saga: Marker;
	invoice: Marker;
	tx: Marker;
	wallet: string;
	push: Marker;
	session: string;
	location: Marker;
	template: Marker;
	/** The admin's keyed PATCH of its closed note: what a repeat must send to be a replay. */
	idem: { key: string; path: string; body: Doc };
	grantMark: Marker;
	/** The tenant's CQRS (webhook) config's id. */
	webhook: string;
}

const rand = () => randomBytes(5).toString("hex");

/**
 * Blanks in an answer every id and marker value its request named (in the path, query or body): echoing what the caller
 * sent reveals nothing.
 */
export function blankNamed(text: string, request: string, values: Iterable<string> = []): string {
	const named = new Set(request.match(ID) ?? []);
	for (const v of values) if (request.includes(v)) named.add(v);
	for (const v of named) text = text.split(v).join("<named>");
	return text;
}

/** A webhook receiver on 127.0.0.1: every body, in arrival order. */
async function hookServer(into: Piece[]): Promise<{ url: string; close(): Promise<void> }> {
	const server = http.createServer((req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			into.push({ what: `webhook ${req.headers["webhook-id"] ?? ""}`, text: Buffer.concat(chunks).toString("utf8") });
			res.writeHead(200, { "content-type": "text/plain" }).end("ok");
		});
	});
	await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
	const port = (server.address() as { port: number }).port;
	return {
		url: `http://127.0.0.1:${port}/hook`,
		close: () => {
			server.closeAllConnections();
			return new Promise<void>((resolve) => server.close(() => resolve()));
		},
	};
}

async function smtpSink(into: string[]): Promise<{ url: string; close(): Promise<void> }> {
	const smtp = new SMTPServer({
		disabledCommands: ["STARTTLS", "AUTH"],
		closeTimeout: 100,
		logger: false,
		onData(stream, _session, cb) {
			const chunks: Buffer[] = [];
			stream.on("data", (c: Buffer) => chunks.push(c));
			stream.on("end", () => {
				into.push(Buffer.concat(chunks).toString("utf8"));
				cb();
			});
		},
	});
	const port = await new Promise<number>((resolve) => smtp.listen(0, "127.0.0.1", () => resolve((smtp.server.address() as { port: number }).port)));
	return { url: `smtp://127.0.0.1:${port}`, close: () => new Promise<void>((resolve) => smtp.close(() => resolve())) };
}

function pushKeys() {
	const ua = createECDH("prime256v1");
	ua.generateKeys();
	return { p256dh: ua.getPublicKey().toString("base64url"), auth: randomBytes(16).toString("base64url") };
}

/** A subscriber that records every message; `topics` refused by the broker (SUBACK 128) are recorded as such. */
export async function mqttReceiver(url: string, p: Principal, topics: string[]): Promise<Receiver & { all(): string }> {
	const pieces: Piece[] = [];
	let taken = 0;
	let client: MqttClient | undefined;
	try {
		client = await mqtt.connectAsync(url, { reconnectPeriod: 0, connectTimeout: 15_000, clientId: `matrix-${rand()}`, username: p.id, password: p.token }, false);
	} catch (err) {
		pieces.push({ what: "MQTT connect", text: `refused: ${(err as Error).message}` });
	}
	if (client) {
		const c = client;
		c.on("message", (topic, payload) => pieces.push({ what: `MQTT ${topic}`, text: payload.toString("utf8") }));
		for (const topic of topics) {
			try {
				const granted = await c.subscribeAsync(topic, { qos: 1 });
				pieces.push({ what: `SUBACK ${topic}`, text: String(granted[0].qos) });
			} catch (err) {
				pieces.push({ what: `SUBACK ${topic}`, text: `refused (${(err as Error).message})` });
			}
		}
	}
	return {
		all: () => pieces.map((x) => x.text).join("\n"),
		async take(proof) {
			if (proof) await waitUntil(() => pieces.slice(taken).some((x) => x.text.includes(proof)), 5000);
			const out = pieces.slice(taken);
			taken = pieces.length;
			return out;
		},
		async skip() {
			taken = pieces.length;
		},
		async close() {
			await client?.endAsync(true).catch(() => undefined);
		},
	};
}

/** `fn` over `items`, at most `width` at a time (a principal's many requests do not flood the gateway), in order. */
export async function inTurn<T, R>(items: T[], fn: (item: T) => Promise<R>, width = 6): Promise<R[]> {
	const out: R[] = new Array(items.length);
	let next = 0;
	const worker = async () => {
		while (next < items.length) {
			const i = next++;
			out[i] = await fn(items[i]);
		}
	};
	await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
	return out;
}

/**
 * The change stream's consumer groups, recorded as the platform starts them: the stream keeps no list of its own, and
 * its stored positions are not the groups a test asks about (they outlive a stopped group).
 */
const started: Array<{ stream: unknown; group: string; consumer: Consumer }> = [];
function recordGroups(): void {
	const proto = OutboxStream.prototype as unknown as { run(group: string, ...rest: unknown[]): Promise<Consumer>; recorded?: boolean };
	if (proto.recorded) return;
	const run = proto.run;
	proto.run = async function (this: unknown, group: string, ...rest: unknown[]) {
		const consumer = await run.call(this, group, ...rest);
		started.push({ stream: this, group, consumer });
		return consumer;
	};
	proto.recorded = true;
}

/** Resolves when `check` holds or after `ms` (the caller asserts on what it then has). */
export async function waitUntil(check: () => boolean, ms: number): Promise<boolean> {
	const end = Date.now() + ms;
	while (!check()) {
		if (Date.now() > end) return false;
		await sleep(25);
	}
	return true;
}

/** The text of a stream from byte `from` on, as one piece. */
export const streamPiece = (what: string, s: LiveStream, from = 0): Piece => ({ what: `${what} (HTTP ${s.status})`, text: s.text().slice(from) });

/**
 * Boots the world: tenants a and b, their markers, their webhooks, the SMTP sink, the witnesses, and one
 * revocation principal per change kind.
 */
export async function bootWorld(): Promise<World> {
	recordGroups();
	const mails: string[] = [];
	const sink = await smtpSink(mails);
	const t = await bootTenancy({ webhookAllowPrivate: true, smtpUrl: sink.url });
	const url = t.p.url;
	const T: Record<TenantName, Tenant> = { a: t.a, b: t.b };
	const markers: Marker[] = [];
	const known: Record<TenantName, Set<string>> = { a: new Set(), b: new Set() };
	const hooks: Record<TenantName, Piece[]> = { a: [], b: [] };
	const closers: Array<() => Promise<void>> = [() => sink.close()];
	const settleNote: Record<TenantName, Marker | undefined> = { a: undefined, b: undefined };
	const secrets: string[] = [];
	for (const name of TENANTS) for (const u of [T[name].admin, T[name].member, T[name].limited]) secrets.push(u.password);
	secrets.push(t.p.root.password, t.p.root.client_secret, t.a.client.secret, t.b.client.secret);

	const principals: Principal[] = [];
	const user = (name: TenantName, role: "admin" | "member" | "limited"): Principal => {
		const u = T[name][role];
		return { key: `${name}.${role}`, tenant: name, kind: "user", id: u.id, token: u.token, cid: T[name].client.id, reach: role === "limited" ? LIMITED_REACH : { "*": FULL } };
	};
	for (const name of TENANTS) principals.push(user(name, "admin"), user(name, "member"), user(name, "limited"));
	for (const name of TENANTS)
		principals.push({ key: `${name}.tenant`, tenant: name, kind: "tenant", id: T[name].client.id, token: "", cid: T[name].client.id, reach: { "*": FULL } });
	const byKey = new Map(principals.map((p) => [p.key, p]));
	const admin = (name: TenantName) => byKey.get(`${name}.admin`)!;

	async function call(p: Principal, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Piece> {
		const r = await t.p.http(method, path, { token: p.token || undefined, body, headers: { "x-zone": ALL_ZONES, ...headers } });
		const request = `${decodeURIComponent(path)} ${body === undefined ? "" : JSON.stringify(body)}`;
		return {
			what: `${method} ${path.split("?")[0]} → ${r.status}`,
			text: blankNamed(
				r.text,
				request,
				markers.flatMap((m) => Object.values(m.fields)),
			),
		};
	}
	/** A document written by the tenant's admin; its answer's data. */
	const write = async (name: TenantName, method: string, path: string, body: Doc, what = path): Promise<Doc> =>
		(await ok(t.as(T[name].admin.token, method, path, body, { "x-zone": ALL_ZONES }), `${name}: ${what}`)).data;
	/** The markers of the planting and of the last burst. */
	let recent: Marker[] = [];
	const mark = (m: Omit<Marker, "stale" | "tags"> & { tags?: string[] }): Marker => {
		const full = { tags: [], stale: [], ...m };
		markers.push(full);
		recent.push(full);
		return full;
	};
	/** A note or post (every value unique), open to `limited` when tagged. */
	async function text(name: TenantName, col: "content/notes" | "content/posts" | "content/tickets", label: string, open: boolean): Promise<Marker> {
		const s = rand();
		const fields: Record<string, string> = { title: `${label}-${name}-t${s}`, content: `${label}-${name}-c${s}` };
		const body: Doc = { ...fields, tags: open ? [LIMITED_TAG] : [] };
		if (col === "content/posts") Object.assign(body, { title: `${fields.title} ${SEARCH_WORD}`, content: `${fields.content} ${SEARCH_WORD}` });
		const d = await write(name, "POST", `/${col}`, body);
		return mark({ tenant: name, col, id: d.id, fields, tags: body.tags });
	}

	// ---- the planted documents of each tenant ----
	const planted = {} as Record<TenantName, Planted>;
	async function plant(name: TenantName): Promise<void> {
		const A = T[name].admin.token;
		const s = rand();
		const openNote = await text(name, "content/notes", "open", true);
		const closedNote = await text(name, "content/notes", "closed", false);
		await text(name, "content/posts", "post", true);
		await text(name, "content/posts", "hidpost", false);
		await text(name, "content/tickets", "ticket", true);
		const fileName = `filen-${name}-${s}.txt`;
		const fileContent = `filec-${name}-${s}`;
		const file = mark({ tenant: name, col: "special/files", id: await upload(A, fileName, fileContent), fields: { name: fileName, content: fileContent } });
		const dev = await write(name, "POST", "/thing/devices", { name: `devname-${name}-${s}`, description: `devdesc-${name}-${s}` });
		const device = mark({ tenant: name, col: "thing/devices", id: dev.id, fields: { name: dev.name, description: dev.description } });
		const sen = await write(name, "POST", "/thing/sensors", { name: `senname-${name}-${s}`, device: dev.id });
		const sensor = mark({ tenant: name, col: "thing/sensors", id: sen.id, fields: { name: sen.name } });
		const sg = await write(name, "POST", "/essential/sagas/start", { ttl: 900 });
		const saga = mark({ tenant: name, col: "essential/sagas", id: sg.id, fields: { job: sg.job } });
		const inv = await write(name, "POST", "/financial/invoices", { amount: 7, currency: WALLET_CURRENCY, status: "ISSUED", description: `invoice-${name}-${s}` });
		const invoice = mark({ tenant: name, col: "financial/invoices", id: inv.id, fields: { description: inv.description } });
		const wallet = walletIdOf(T[name].admin.id);
		await waitForValue(`${name}'s admin wallet`, async () => (await t.as(A, "GET", `/financial/wallets/${wallet}`, undefined, { "x-zone": ALL_ZONES })).status === 200, 30_000);
		const txd = await write(name, "POST", "/financial/transactions/init", { type: "DEPOSIT", amount: 5, payees: [{ wallet, amount: 5 }] });
		const tx = mark({ tenant: name, col: "financial/transactions", id: txd.id, fields: { saga: String(txd.saga) } });
		const session = payloadOf(A).session as string;
		const endpoint = `http://localhost:9/push/endpoint-${name}-${s}`;
		const pu = await write(name, "POST", "/touch/pushes", { session, keys: pushKeys(), endpoint, expiration: 1_900_000_000 });
		const push = mark({ tenant: name, col: "touch/pushes", id: pu.id, fields: { endpoint } });
		const loc = await write(name, "POST", "/logistic/locations", {
			name: `locname-${name}-${s}`,
			address: `locaddr-${name}-${s}`,
			lat: 10 + Math.random(),
			lng: 20 + Math.random(),
		});
		const location = mark({ tenant: name, col: "logistic/locations", id: loc.id, fields: { name: loc.name, address: loc.address } });
		const tplName = `tpl-${name}-${s}`;
		const tplText = `tpltext-${name}-${s} {{code}}`;
		const cfg = await write(name, "POST", "/context/configs", { key: "SMS_TEMPLATE", value: { name: tplName, text: tplText } });
		const template = mark({ tenant: name, col: "context/configs", id: cfg.id, fields: { name: tplName, text: `tpltext-${name}-${s}` } });
		// What `limited` may ask /auth/can about: its own grant, whose row filter names a value of this tenant only.
		const ref = `grantmark-${name}-${s}`;
		const g = await t.grant(A, { subject: T[name].limited.subject, action: "read", object: "content:tickets", filter: [JSON.stringify({ ref })] });
		const grantMark = mark({ tenant: name, col: "auth/grants", id: g.id, fields: { ref }, tags: [LIMITED_TAG] });
		// The admin's keyed write: its kept answer holds the closed note whole.
		const idem = { key: `matrix-${name}-${s}`, path: `/content/notes/${closedNote.id}`, body: { props: { kept: true } } };
		await ok(t.as(A, "PATCH", idem.path, idem.body, { "idempotency-key": idem.key, "x-zone": ALL_ZONES }), `${name}: keyed patch`);
		const p: Omit<Planted, "webhook"> = { openNote, closedNote, file, device, sensors: [sensor], saga, invoice, tx, wallet, push, session, location, template, idem, grantMark };
		// The webhook: every change of the tenant, its credentials write-only.
		const hook = await hookServer(hooks[name]);
		closers.push(hook.close);
		const authorization = `Bearer hooksecret-${name}-${s}`;
		const secret = `whsec_${Buffer.from(`signing-${name}-${s}`).toString("base64")}`;
		const webhook = (await write(name, "POST", "/context/configs", { key: "CQRS", value: { webhook: hook.url, authorization, secret } }, "webhook")).id as string;
		planted[name] = { ...p, webhook };
		secrets.push(authorization, `hooksecret-${name}-${s}`, secret);
	}

	async function upload(token: string, name: string, content: string): Promise<string> {
		const fd = new FormData();
		fd.append("name", name);
		fd.append("file", new Blob([content], { type: "text/plain" }), name);
		const r = await fetch(`${url}/special/files/upload`, { method: "POST", body: fd, headers: { authorization: `Bearer ${token}` } });
		const text = await r.text();
		if (r.status !== 200) throw new Error(`upload ${name}: ${r.status} ${text.slice(0, 300)}`);
		return JSON.parse(text).items[0].id;
	}

	// The limited principals' grants (LIMITED_REACH), given by their tenant's admin, then a token that carries them.
	async function limit(name: TenantName): Promise<void> {
		const A = T[name].admin.token;
		const subject = T[name].limited.subject;
		const filter = [JSON.stringify({ tags: LIMITED_TAG })];
		await t.grant(A, { subject, action: "read", object: "content:notes", field: ["title"], filter });
		await t.grant(A, { subject, action: "search", object: "content:posts", field: ["title"], filter });
		await t.grant(A, { subject, action: "read", object: "thing:sensors" });
		await t.grant(A, { subject, action: "read", object: "thing:devices", field: ["name"] });
	}

	await Promise.all(
		TENANTS.map(async (name) => {
			await limit(name);
			await plant(name);
		}),
	);
	// Sensors naming the other tenant's device: populate must not resolve it.
	for (const name of TENANTS) {
		const foreign = planted[other(name)].device.id;
		const d = await write(name, "POST", "/thing/sensors", { name: `xsen-${name}-${rand()}`, device: foreign });
		planted[name].sensors.push(mark({ tenant: name, col: "thing/sensors", id: d.id, fields: { name: d.name } }));
		known[name].add(foreign);
	}
	const plantedMarkers = recent;
	recent = [];
	let previous: Marker[] = [];
	for (const name of TENANTS) {
		const l = T[name].limited;
		l.token = await t.login(T[name], l.username, l.password);
		byKey.get(`${name}.limited`)!.token = l.token;
	}

	// ---- the revocation principals (tenant a), one per change kind ----
	const revoked = new Map<ChangeKind, Revoked>();
	const A = T.a.admin.token;
	async function revocable(kind: ChangeKind, slug: string): Promise<Revoked> {
		const username = `rv-${slug}`;
		const password = `pw-${slug}-${rand()}-Secret1`;
		secrets.push(password);
		const role = kind === "role removed" ? `@rv-${slug}` : undefined;
		const u = (await ok(t.as(T.a.clientToken, "POST", "/identity/users", { username, password, subjects: role ? [role] : [] }), `user ${username}`)).data;
		const subject = role ? `${role}@${T.a.domain}` : `${u.id}@${T.a.domain}`;
		const items = RV_GRANTS.map((g) => ({ subject, action: g.action, object: g.object }));
		if (kind === "APT revoked") items.push({ subject: `${u.id}@${T.a.domain}`, action: "manage", object: "auth:apts" });
		const ids = ((await ok(t.as(A, "POST", "/auth/grants/bulk", { items }), `grants of ${username}`)).items as Doc[]).map((g) => g.id as string);
		const jwt = await t.login(T.a, username, password);
		let token = jwt;
		let apply: () => Promise<void>;
		switch (kind) {
			case "grant removed":
				apply = async () => {
					for (const id of ids) await ok(t.as(A, "DELETE", `/auth/grants/${id}`), "remove grant");
				};
				break;
			case "grant narrowed":
				apply = async () => {
					for (const [i, g] of RV_GRANTS.entries()) {
						if (!g.narrow) continue;
						await t.grant(A, { subject, action: g.action, object: g.object, field: g.narrow.field, ...(g.narrow.filter ? { filter: [JSON.stringify(g.narrow.filter)] } : {}) });
						await ok(t.as(A, "DELETE", `/auth/grants/${ids[i]}`), "remove the wider grant");
					}
				};
				break;
			case "role removed":
				apply = async () => void (await ok(t.as(T.a.clientToken, "PATCH", `/identity/users/${u.id}`, { subjects: [] }), "remove role"));
				break;
			case "logout":
				apply = async () => void (await ok(t.as(jwt, "GET", "/auth/logout"), "logout"));
				break;
			case "APT revoked": {
				const apt = (await ok(t.as(jwt, "POST", "/auth/apts", { name: "matrix device" }), "apt")).data;
				token = apt.token;
				secrets.push(apt.token);
				apply = async () => void (await ok(t.as(jwt, "DELETE", `/auth/apts/${apt.id}`), "revoke apt"));
				break;
			}
			default:
				throw new Error(`no user change ${kind}`);
		}
		const s = rand();
		const fileName = `rvfile-${slug}-${s}.txt`;
		const fileContent = `rvcontent-${slug}-${s}`;
		const file = mark({ tenant: "a", col: "special/files", id: await upload(jwt, fileName, fileContent), fields: { name: fileName, content: fileContent } });
		// A grant as /auth/can presents it among the policies (without its id): only this principal's grants read so.
		const grantMarkers = RV_GRANTS.map((g, i) =>
			mark({
				tenant: "a",
				col: "auth/grants",
				id: ids[i],
				fields: { policy: `"subject":"${subject}","action":"${g.action}","object":"${g.object}","field":null,"filter":null` },
				tags: g.narrow ? [] : [UNNARROWED],
			}),
		);
		const p: Principal = { key: `a.${username}`, tenant: "a", kind: "user", id: u.id, token, cid: T.a.client.id, reach: { "*": FULL } };
		const r: Revoked = {
			kind,
			p,
			user: { id: u.id, username, password, jwt, subject },
			grants: grantMarkers.map((g) => g.fields.policy),
			file,
			apply: async () => {
				await apply();
				p.reach = kind === "grant narrowed" ? NARROWED_REACH : {};
			},
		};
		return r;
	}
	const slugs: Record<Exclude<ChangeKind, "webhook config removed">, string> = {
		"grant removed": "grant",
		"grant narrowed": "narrow",
		"role removed": "role",
		logout: "logout",
		"APT revoked": "apt",
	};
	for (const r of await Promise.all(USER_CHANGES.map((kind) => revocable(kind, slugs[kind as keyof typeof slugs])))) {
		revoked.set(r.kind, r);
		principals.push(r.p);
		byKey.set(r.p.key, r.p);
	}
	// Tenant b's webhook: its config deleted.
	const bHook = byKey.get("b.tenant")!;
	revoked.set("webhook config removed", {
		kind: "webhook config removed",
		p: bHook,
		user: { id: "", username: "", password: "", jwt: "", subject: "" },
		grants: [],
		file: planted.b.file,
		apply: async () => {
			const list = (await ok(t.as(T.b.admin.token, "GET", `/context/configs?query=${encodeURIComponent(JSON.stringify({ key: "CQRS" }))}`), "b's CQRS configs")).items as Doc[];
			for (const c of list) await ok(t.as(T.b.admin.token, "DELETE", `/context/configs/${c.id}`), "delete b's webhook");
			bHook.reach = {};
		},
	});

	// ---- the catch-up gate: a test seam on the gateway's live cursors ----
	const gates = new Map<string, { reach: () => void; reached: Promise<void>; release: () => void; released: Promise<void> }>();
	const gate = (id: string) => {
		let g = gates.get(id);
		if (!g) {
			let reach!: () => void;
			let release!: () => void;
			const reached = new Promise<void>((r) => (reach = r));
			const released = new Promise<void>((r) => (release = r));
			gates.set(id, (g = { reach, reached, release, released }));
		}
		return g;
	};
	const hub = (t.p.broker.getLocalService("api") as any).liveCursors;
	if (typeof hub?.prepare !== "function") throw new Error("the gateway's live cursors have no prepare(): the catch-up row's gate needs a new seam");
	const prepare = hub.prepare.bind(hub);
	hub.prepare = async (req: { headers: Record<string, unknown> }, ...rest: unknown[]) => {
		const started = await prepare(req, ...rest);
		const id = req.headers["x-matrix-gate"];
		if (typeof id === "string" && started) {
			const g = gate(id);
			g.reach();
			await g.released;
		}
		return started;
	};

	// ---- witnesses: each tenant's admin on a live cursor and on MQTT, which settle() waits on ----
	const mqttUrl = ((await t.p.broker.call("preserver.brokerUrl")) as { url: string }).url;
	const wsUrl = `${url.replace(/^http/, "ws")}/mqtt`;
	const stream = async (p: Principal, pathAndQuery: string, headers: Record<string, string> = {}) =>
		openStream(`${url}${pathAndQuery}`, { ...(p.token ? { authorization: `Bearer ${p.token}` } : {}), "x-zone": ALL_ZONES, ...headers });
	const witnesses: Array<{ tenant: TenantName; has(v: string): boolean; close(): Promise<void> }> = [];
	for (const name of TENANTS) {
		const s = await stream(admin(name), "/content/notes/cursor?live=true");
		await s.waitFor((f) => f.event === "live");
		witnesses.push({ tenant: name, has: (v) => s.text().includes(v), close: async () => s.close() });
		const m = await mqttReceiver(mqttUrl, admin(name), [`platform/client/${T[name].client.id}/content/notes/#`]);
		witnesses.push({ tenant: name, has: (v) => m.all().includes(v), close: () => m.close() });
		witnesses.push({
			tenant: name,
			has: (v) => byKey.get(`${name}.tenant`)!.reach["*"] === undefined || hooks[name].some((h) => h.text.includes(v)),
			close: async () => undefined,
		});
	}

	const consumers = () => started.filter((c) => c.stream === embeddedStream(t.p.cfg));
	const w: World = {
		t,
		url,
		principals,
		byKey,
		markers,
		secrets,
		known,
		planted,
		settleNote,
		revoked,
		hooks,
		mails,
		mqttUrl,
		wsUrl,
		call,
		probes: (col) => [...plantedMarkers, ...previous, ...recent].filter((m) => m.col === col),
		async burst(label) {
			previous = recent;
			recent = [];
			await Promise.all(
				TENANTS.map(async (name) => {
					await text(name, "content/notes", `${label}-closed`, false);
					await text(name, "content/posts", `${label}-post`, true);
					await text(name, "content/posts", `${label}-hidpost`, false);
					await text(name, "content/tickets", `${label}-ticket`, true);
					// A note whose first title is replaced: a path that serves current states never sends the first one.
					const stale = await text(name, "content/notes", `${label}-stale`, true);
					const fresh = `${label}-fresh-${name}-t${rand()}`;
					await write(name, "PATCH", `/content/notes/${stale.id}`, { title: fresh });
					stale.stale.push(stale.fields.title);
					stale.fields.title = fresh;
					settleNote[name] = await text(name, "content/notes", `${label}-open`, true);
				}),
			);
		},
		async windowWrites(label) {
			const kept = recent;
			recent = [];
			await Promise.all(
				TENANTS.map(async (name) => {
					await text(name, "content/tickets", `${label}-wticket`, true);
					await text(name, "content/notes", `${label}-wclosed`, false);
					settleNote[name] = await text(name, "content/notes", `${label}-wopen`, true);
				}),
			);
			recent = kept;
		},
		groups: () => consumers().map((c) => c.group),
		async settle() {
			// Every group past the newest record: MQTT messages acknowledged, webhook deliveries queued, emails claimed.
			const head = await sharedOutbox(t.p.cfg).head();
			if (!(await waitUntil(() => consumers().every((c) => c.consumer.position() >= head), 20_000)))
				throw new Error(
					`consumer groups behind position ${head}: ${consumers()
						.filter((c) => c.consumer.position() < head)
						.map((c) => `${c.group} at ${c.consumer.position()}`)
						.join(", ")}`,
				);
			for (const x of witnesses) {
				const note = settleNote[x.tenant];
				if (note) await waitUntil(() => x.has(note.fields.title), 10_000);
			}
			await sleep(300);
		},
		gate: (id) => {
			const g = gate(id);
			return { reached: g.reached, release: g.release };
		},
		stream,
		async close() {
			for (const x of witnesses) await x.close().catch(() => undefined);
			await t.cleanup();
			for (const c of closers) await c().catch(() => undefined);
		},
	};
	return w;
}
