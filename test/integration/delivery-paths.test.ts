/**
 * The delivery-path matrix (docs/security.md, "Delivery paths"): every path by which the platform hands a document, or
 * part of one, to a client is a row of ROWS, and each row is run, on both document stores, for the principals of two
 * tenants (test/helpers/delivery-world.ts: each tenant's admin, member and field- and row-limited user, and each
 * tenant's webhook):
 *
 * 1. **The surface.** The gateway's routes, its HTTP upgrade handlers, the workers, the change stream's consumer groups
 *    and the node's other services are read from the booted platform; each must be covered by a row or named in an
 *    exemption with its reason. A new path without a row fails here, with its name.
 * 2. **The view.** Every principal opens every row, both tenants write (new, changed and other collections' documents),
 *    and what it received is searched as raw text: no id or value of a document outside its view, no value or name of
 *    a field its grant hides, no secret, and (paths that serve current states) no value a document no longer holds;
 *    each principal also receives what it may see (an empty answer cannot pass).
 * 3. **Revocations.** One principal per change (grant removed, grant narrowed, role removed, logout, APT revoked; for
 *    webhooks, the CQRS config removed) opens every row and receives its documents; the change is made; from 2 s after
 *    its answer on, nothing it no longer may see arrives through any row (a narrowed grant: only the narrowed view).
 *
 * Adding a path: a row here (what it covers, how a principal opens it and what it receives), or an exemption with its
 * reason. The catch-up row holds live requests between their start position and their listing through a seam on the
 * gateway's live cursors (`x-matrix-gate`, test/helpers/delivery-world.ts), so the writes it checks fall in that window.
 */
import { randomBytes } from "crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { DOMAINS, findCollection, PLATFORM_FIELDS, SETTABLE_FIELDS, STANDARD_OPS, type StandardOp } from "../../catalog";
import type { LiveStream } from "../helpers/live-sse";
import { surfaceOf, type GatewayRoute } from "../helpers/delivery-surface";
import {
	ALL_ZONES,
	blankNamed,
	bootWorld,
	CHANGE_TO,
	CHANGES,
	USER_CHANGES,
	inTurn,
	mqttReceiver,
	other,
	SEARCH_WORD,
	streamPiece,
	TENANTS,
	waitUntil,
	type ChangeKind,
	type Marker,
	type Piece,
	type Planted,
	type Principal,
	type Receiver,
	type World,
} from "../helpers/delivery-world";
import { sleep } from "../helpers/wait";

jest.setTimeout(240_000);

/** How long a change may take to hold on every path. */
const EFFECT_MS = 2000;

interface Row {
	name: string;
	/** Who receives through it: a bearer's holder, or a tenant (its webhook). */
	to: "user" | "tenant";
	/** The collections whose documents it hands out; `*`: every collection of the receiver's tenant. */
	collections: string[] | "*";
	/** It serves documents as they are now: a value a document no longer holds never comes through it. */
	current?: boolean;
	/** Taken after the other rows, one principal at a time (it writes documents of its own). */
	serial?: boolean;
	open(w: World, p: Principal): Promise<Receiver>;
	/** A value the principal must receive through it while it may read it; undefined: none is required. */
	proof(w: World, p: Principal): string | undefined;
	/** The gateway routes it covers. */
	routes?: (r: GatewayRoute) => boolean;
	/** The HTTP upgrade paths it covers. */
	upgrades?: string[];
	/** The workers (`worker <name>`) and the change stream's consumer groups (`group <name>`) it covers. */
	publishers?: string[];
	/** Changes that do not concern it, with the reason. */
	notFor?: Partial<Record<ChangeKind, string>>;
}

// ------------------------------------------------------------------------------------------------------------------
// What a principal may see (the model of test/helpers/delivery-world.ts), and what it must then never receive
// ------------------------------------------------------------------------------------------------------------------

const reachOf = (p: Principal, col: string) => p.reach[col] ?? p.reach["*"];

/** Whether `p` may read `m` through `row`, and which of its fields. */
function sight(p: Principal, m: Marker, row: Row): { seen: boolean; fields?: string[] } {
	if (row.collections !== "*" && !row.collections.includes(m.col)) return { seen: false };
	if (m.tenant !== p.tenant) return { seen: false };
	const r = reachOf(p, m.col);
	if (!r || (r.rows && !r.rows(m))) return { seen: false };
	return { seen: true, fields: r.fields };
}

/** The most recent marker of `col` whose `field` `p` may read through `row`: its value. */
function latestVisible(w: World, p: Principal, row: Row, col: string, field: string): string | undefined {
	for (let i = w.markers.length - 1; i >= 0; i--) {
		const m = w.markers[i];
		if (m.col !== col || m.fields[field] === undefined) continue;
		const s = sight(p, m, row);
		if (s.seen && (!s.fields || s.fields.includes(field))) return m.fields[field];
	}
	return undefined;
}

const describeMarker = (m: Marker) => `${m.col} ${m.id} of tenant ${m.tenant}`;

/** Every field name of a collection: its own, the common ones. */
function fieldNames(col: string): string[] {
	const [service, name] = col.split("/");
	const c = findCollection(service, name);
	return c ? [...Object.keys(c.collection.fields), ...Object.keys(PLATFORM_FIELDS), ...Object.keys(SETTABLE_FIELDS)] : [];
}

/**
 * Field names `p` may read of none of the row's collections: as a JSON key (`"owner":`) they appear nowhere in what it
 * receives (a row of several collections, one of them read whole, names every field of its own).
 */
function hiddenNames(p: Principal, row: Row): string[] {
	if (row.collections === "*") return [];
	const hidden = row.collections.map((col) => {
		const r = reachOf(p, col);
		return r?.fields ? fieldNames(col).filter((f) => f !== "id" && !r.fields!.includes(f)) : [];
	});
	return hidden.reduce((a, b) => a.filter((f) => b.includes(f)));
}

/** Every value `p` must never receive through `row`, with why. */
function forbidden(w: World, p: Principal, row: Row): Array<{ value: string; why: string }> {
	const out: Array<{ value: string; why: string }> = w.secrets.map((value) => ({ value, why: "a secret" }));
	for (const f of hiddenNames(p, row)) out.push({ value: `"${f}":`, why: `the name of the field ${f}, which the grant hides` });
	for (const m of w.markers) {
		const s = sight(p, m, row);
		if (!s.seen) {
			if (!w.known[p.tenant].has(m.id)) out.push({ value: m.id, why: `the id of ${describeMarker(m)}, outside the view` });
			for (const [f, v] of Object.entries(m.fields)) out.push({ value: v, why: `${f} of ${describeMarker(m)}, outside the view` });
			for (const v of m.stale) out.push({ value: v, why: `a former value of ${describeMarker(m)}, outside the view` });
			continue;
		}
		for (const [f, v] of Object.entries(m.fields)) if (s.fields && !s.fields.includes(f)) out.push({ value: v, why: `${f} of ${describeMarker(m)}, a field the grant hides` });
		if (row.current) for (const v of m.stale) out.push({ value: v, why: `a former value of ${describeMarker(m)}, replaced since` });
	}
	return out;
}

/** Characters of a marker value: a value made of them only is found as a whole word of the text. */
const WORD = /^[A-Za-z0-9_.-]+$/;
const WORDS = /[^A-Za-z0-9_.-]+/;

/** What is wrong with what `p` received through `row`: leaks, and a proof that did not come. */
function problemsOf(w: World, p: Principal, row: Row, pieces: Piece[], proof: string | undefined): string[] {
	const problems: string[] = [];
	// Every word received, once: a marker is a word of its own wherever it is (JSON, a topic, a mail), so thousands of
	// values are looked up without scanning the text for each one.
	const words = new Set(pieces.flatMap((x) => x.text.split(WORDS)));
	const all = pieces.map((x) => x.text).join("\n");
	for (const f of forbidden(w, p, row)) {
		if (WORD.test(f.value) ? !words.has(f.value) : !all.includes(f.value)) continue;
		const where = pieces.filter((x) => x.text.includes(f.value));
		problems.push(
			`${p.key} received ${f.why} (${f.value}) in ${where
				.map((x) => x.what)
				.slice(0, 3)
				.join("; ")}`,
		);
	}
	for (const x of pieces.filter((x) => /(→|HTTP) 5\d\d/.test(x.what))) problems.push(`${p.key} got a server error: ${x.what}: ${x.text.slice(0, 200)}`);
	if (proof !== undefined && !pieces.some((x) => x.text.includes(proof)))
		problems.push(
			`${p.key} did not receive ${proof}, which it may see (got: ${
				pieces
					.map((x) => `${x.what}: ${x.text.slice(0, 160)}`)
					.slice(0, 4)
					.join(" | ") || "nothing"
			})`,
		);
	return problems;
}

// ------------------------------------------------------------------------------------------------------------------
// Receivers
// ------------------------------------------------------------------------------------------------------------------

/** A path asked anew at every take (requests). */
const asked = (fn: () => Promise<Piece[]>): Receiver => ({ take: fn, close: async () => undefined });

const isRevocable = (w: World, p: Principal) => [...w.revoked.values()].some((r) => r.p === p && r.kind !== "webhook config removed");
const plantedOf = (w: World, p: Principal): Planted => w.planted[p.tenant];
const foreign = (w: World, p: Principal): Planted => w.planted[other(p.tenant)];
const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));
const LIVE = "/content/notes/cursor?live=true";

/** A live stream open until closed: each take hands what arrived since the last one. */
async function liveReceiver(w: World, p: Principal): Promise<Receiver> {
	const s = await w.stream(p, LIVE);
	if (s.status === 200) await s.waitFor((f) => f.event === "live" || f.event === "error").catch(() => undefined);
	let from = s.text().length;
	return {
		async take(proof) {
			if (proof && s.status === 200) await waitUntil(() => s.text().slice(from).includes(proof), 5000);
			const piece = streamPiece("live changes", s, from);
			from = s.text().length;
			return [piece];
		},
		async skip() {
			from = s.text().length;
		},
		async close() {
			s.close();
		},
	};
}

/** Resumes from the last position it was given (the `id:` of a frame, never made up), at every take. */
async function resumeReceiver(w: World, p: Principal): Promise<Receiver> {
	const first = await w.stream(p, LIVE);
	let position: string | undefined;
	let refused: Piece | undefined;
	if (first.status === 200) position = (await first.waitFor((f) => f.event === "live", 5000).catch(() => undefined))?.id;
	else refused = streamPiece("live cursor (to take a position)", first);
	first.close();
	return {
		async take(proof) {
			if (!position) return [refused ?? { what: "resume", text: "no position was given" }];
			const s = await w.stream(p, LIVE, { "last-event-id": position });
			if (s.status === 200) await waitUntil(() => (proof ? s.text().includes(proof) : false) || s.frames.some((f) => f.event === "error"), proof ? 5000 : 1000);
			const last = [...s.frames].reverse().find((f) => f.id);
			if (last?.id) position = last.id;
			s.close();
			return [streamPiece(`resume after ${position}`, s)];
		},
		async close() {},
	};
}

/** A live request held between its start position and its listing while both tenants write, then read to its end. */
function catchUpReceiver(w: World, p: Principal): Receiver {
	let n = 0;
	return {
		async take() {
			const id = `gate-${randomBytes(6).toString("hex")}`;
			const g = w.gate(id);
			const opening = w.stream(p, LIVE, { "x-matrix-gate": id });
			const held = await Promise.race([g.reached.then(() => true), opening.then(() => false)]);
			await w.windowWrites(`cu${n++}`);
			g.release();
			const s: LiveStream = await opening;
			if (!held || s.status !== 200) return [streamPiece("catch-up (refused)", s)];
			const live = await s.waitFor((f) => f.event === "live" || f.event === "error", 5000).catch(() => undefined);
			const proof = ROW.catchUp.proof(w, p);
			if (proof) await waitUntil(() => s.text().split("event: live")[1]?.includes(proof) ?? false, 5000);
			s.close();
			const after = live ? s.text().indexOf("event: live") : 0;
			return [streamPiece("catch-up after the listing", s, Math.max(0, after))];
		},
		async close() {},
	};
}

/** A tenant's webhook: each take hands the bodies that arrived since the last one. */
function hookReceiver(w: World, p: Principal): Receiver {
	let from = w.hooks[p.tenant].length;
	return {
		async take(proof) {
			const all = w.hooks[p.tenant];
			if (proof) await waitUntil(() => all.slice(from).some((x) => x.text.includes(proof)), 5000);
			const out = all.slice(from);
			from = all.length;
			return out;
		},
		async skip() {
			from = w.hooks[p.tenant].length;
		},
		async close() {},
	};
}

/**
 * Emails with attachments: one naming the other tenant's file (refused when written), and, for principals that own a
 * file, one attaching it sent now and (revocation principals) one scheduled in an hour, brought forward by the tenant's
 * admin at the second take: its delivery is decided after the change.
 */
async function mailReceiver(w: World, p: Principal): Promise<Receiver> {
	const tag = `mx-${p.key}-${randomBytes(4).toString("hex")}`;
	const from = `noreply@${w.t[p.tenant].domain}`;
	const email = (attachments: string[], suffix: string, date?: string) =>
		w.call(p, "POST", "/touch/emails", {
			provider: "nodemailer",
			to: ["matrix@example.com"],
			from,
			subject: `${tag}-${suffix}`,
			text: "attached",
			attachments,
			...(date ? { date } : {}),
		});
	const written: Piece[] = [await email([foreign(w, p).file.id], "foreign")];
	const own = ownFile(w, p);
	let later: string | undefined;
	if (own) {
		written.push(await email([own.id], "now"));
		const l = await email([own.id], "later", new Date(Date.now() + 3_600_000).toISOString());
		written.push(l);
		later = isRevocable(w, p) ? /"id":"([0-9a-f]{24})"/.exec(l.text)?.[1] : undefined;
	}
	/** The scheduled email made due now by the tenant's admin (its owner may have lost its rights), then its end. */
	const bringForward = async (id: string) => {
		const admin = w.byKey.get(`${p.tenant}.admin`)!;
		await w.call(admin, "PATCH", `/touch/emails/${id}`, { date: new Date().toISOString() });
		const end = Date.now() + 10_000;
		while (Date.now() < end) {
			const state = (await w.t.p.http("GET", `/touch/emails/${id}`, { token: admin.token, headers: { "x-zone": ALL_ZONES } })).body?.data?.state;
			if (state === "SENT" || state === "FAILED") return;
			await sleep(100);
		}
	};
	let taken = 0;
	let first = true;
	return {
		async take(proof) {
			const out = first ? written : [];
			if (!first && later) await bringForward(later);
			first = false;
			const mine = () =>
				w.mails
					.slice(taken)
					.filter((m) => m.includes(tag))
					.map(decodeMail);
			if (proof) await waitUntil(() => mine().some((m) => m.includes(proof)), 10_000);
			const mails = mine();
			taken = w.mails.length;
			return [...out, ...mails.map((text) => ({ what: "mail", text }))];
		},
		async close() {},
	};
}

/** The principal's own file (the owner attaches it): the admin's planted one, or a revocation principal's. */
function ownFile(w: World, p: Principal): Marker | undefined {
	const r = [...w.revoked.values()].find((x) => x.p === p && x.kind !== "webhook config removed");
	if (r) return r.file;
	return p.key.endsWith(".admin") ? plantedOf(w, p).file : undefined;
}

/** A MIME message with its base64 parts decoded (attachments are base64). */
function decodeMail(raw: string): string {
	return raw.replace(/\r?\n\r?\n([A-Za-z0-9+/=\r\n]{8,})(?=\r?\n--)/g, (all, b64: string) => `${all}\n${Buffer.from(b64.replace(/\s/g, ""), "base64").toString("utf8")}`);
}

// ------------------------------------------------------------------------------------------------------------------
// The special actions: each routed one, called naming the other tenant's documents (and, to prove the path, its own)
// ------------------------------------------------------------------------------------------------------------------

type Call = [method: string, path: string, body?: unknown];
const SPECIAL_CALLS: Record<string, (o: Planted, mine: Planted, p: Principal) => Call[]> = {
	"POST /essential/sagas/start": () => [["POST", "/essential/sagas/start", { ttl: 60 }]],
	"POST /essential/sagas/add": (o) => [["POST", "/essential/sagas/add", { saga: o.saga.id, bucket: "content/notes", action: "FIND", req: { matrix: true } }]],
	"GET /essential/sagas/:id/abort": (o) => [["GET", `/essential/sagas/${o.saga.id}/abort`]],
	"GET /essential/sagas/:id/commit": (o) => [["GET", `/essential/sagas/${o.saga.id}/commit`]],
	"POST /financial/invoices/:id/payment": (o, mine) => [["POST", `/financial/invoices/${o.invoice.id}/payment`, { wallet: mine.wallet }]],
	"POST /financial/transactions/init": (o, mine) => [
		["POST", "/financial/transactions/init", { amount: 1, payers: [{ wallet: o.wallet, amount: 1 }], payees: [{ wallet: mine.wallet, amount: 1 }] }],
	],
	"GET /financial/transactions/:id/verify": (o) => [["GET", `/financial/transactions/${o.tx.id}/verify`]],
	"GET /financial/transactions/:id/abort": (o) => [["GET", `/financial/transactions/${o.tx.id}/abort`]],
	// Multipart: sent by uploadPiece.
	"POST /special/files/upload": () => [],
	"POST /special/files/:id/share": (o) => [["POST", `/special/files/${o.file.id}/share`, { ttl: 60 }]],
	"POST /special/stats/collect": () => [["POST", "/special/stats/collect", { period: "daily" }]],
	// A config's webhook deliveries (ids, topics and states of the tenant's changes, never a payload) and their redelivery.
	"GET /context/configs/:id/deliveries": (o, mine) => [
		["GET", `/context/configs/${o.webhook}/deliveries?limit=100`],
		["GET", `/context/configs/${o.webhook}/deliveries?zone=${ALL_ZONES}`],
		["GET", `/context/configs/${mine.webhook}/deliveries?limit=100`],
	],
	"POST /context/configs/:id/deliveries/:delivery/redeliver": (o, mine) => [
		["POST", `/context/configs/${o.webhook}/deliveries/1/redeliver`],
		["POST", `/context/configs/${mine.webhook}/deliveries/1/redeliver`],
	],
	"POST /touch/emails/send": (o, _m, p) => [
		[
			"POST",
			"/touch/emails/send",
			{ provider: "nodemailer", to: ["matrix@example.com"], from: `noreply@${p.tenant}.example`, subject: "matrix", text: "t", attachments: [o.file.id] },
		],
	],
	"POST /touch/pushes/send": (o) => [
		["POST", "/touch/pushes/send", { push: o.push.id, title: "matrix", body: "b" }],
		["POST", "/touch/pushes/send", { session: o.session, title: "matrix", body: "b" }],
	],
	"POST /touch/smss/send": () => [["POST", "/touch/smss/send", { provider: "kavenegar", message: "matrix", receptors: ["+14155550123"] }]],
	"POST /touch/smss/send/template": (o) => [
		["POST", "/touch/smss/send/template", { provider: "kavenegar", receptors: ["+14155550123"], template: o.template.fields.name, params: { code: "1" } }],
	],
	"POST /logistic/locations/resolve": (o, mine) => [
		["POST", "/logistic/locations/resolve", { query: o.location.fields.name }],
		["POST", "/logistic/locations/resolve", { lat: 0, lng: 0 }],
		["POST", "/logistic/locations/resolve", { query: mine.location.fields.name }],
	],
	"POST /logistic/travels/resolve": (o) => [
		["POST", "/logistic/travels/resolve", { origin: o.location.id, destination: { lat: 0, lng: 0 } }],
		["POST", "/logistic/travels/resolve", { origin: { lat: 0, lng: 0 }, destination: o.location.id }],
	],
	"POST /conjoint/accounts/generate": () => [["POST", "/conjoint/accounts/generate", { name: "matrix" }]],
};

/** A multipart upload as the principal (the special `upload`): its answer. */
async function uploadPiece(w: World, p: Principal): Promise<Piece> {
	const fd = new FormData();
	fd.append("name", "matrix.txt");
	fd.append("file", new Blob(["matrix upload"], { type: "text/plain" }), "matrix.txt");
	const r = await fetch(`${w.url}/special/files/upload`, { method: "POST", body: fd, headers: { authorization: `Bearer ${p.token}` } });
	return { what: `POST /special/files/upload → ${r.status}`, text: await r.text() };
}

/** A tool call of an MCP session: its answer (text and structured content), or the HTTP refusal of its request. */
type McpTool = (name: string, args: Record<string, unknown>) => Promise<Piece>;

/**
 * An MCP session of the principal (the SDK's client over `/mcp`, opened with its bearer): each take calls its tools
 * anew. What a tool names (ids, values of its arguments) is blanked in its answer, as for REST requests.
 */
async function mcpReceiver(w: World, p: Principal, ask: (tool: McpTool) => Promise<Piece[]>): Promise<Receiver> {
	const client = new Client({ name: "delivery-matrix", version: "1.0.0" });
	await client.connect(new StreamableHTTPClientTransport(new URL(`${w.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${p.token}` } } }));
	const values = () => w.markers.flatMap((m) => Object.values(m.fields));
	const tool: McpTool = async (name, args) => {
		const request = JSON.stringify(args);
		try {
			const r = (await client.callTool({ name, arguments: args })) as CallToolResult;
			const text = r.content.map((c) => (c.type === "text" ? c.text : JSON.stringify(c))).join("\n");
			const status = r.isError ? JSON.parse(text).statusCode : 200;
			return { what: `MCP ${name} ${request.slice(0, 120)} → ${status}`, text: blankNamed(`${text}\n${JSON.stringify(r.structuredContent ?? null)}`, request, values()) };
		} catch (err) {
			// A request the gateway refused before the MCP server saw it (a revoked token: 401).
			const e = err as { code?: unknown; message?: unknown };
			return { what: `MCP ${name} → HTTP ${String(e.code)}`, text: blankNamed(String(e.message), request, values()) };
		}
	};
	return { take: () => ask(tool), close: () => client.close().catch(() => undefined) };
}

/** Every gateway route of `/mcp` (POST requests, GET, DELETE a session). */
const mcpRoutes = (r: GatewayRoute) => r.path === "/mcp";

// ------------------------------------------------------------------------------------------------------------------
// The rows
// ------------------------------------------------------------------------------------------------------------------

const op =
	(...ops: StandardOp[]) =>
	(r: GatewayRoute) =>
		ops.some((o) => r.engine === `op:${o}`);
const WRITE_OPS = (Object.keys(STANDARD_OPS) as StandardOp[]).filter((o) => !["get", "list", "count", "cursor"].includes(o));
/**
 * A row of content/notes to a bearer's holder, which must hand the principal the newest note whose title it may read
 * (unless the row says otherwise).
 */
function notesRow(r: Omit<Row, "to" | "collections" | "proof"> & Partial<Pick<Row, "proof">>): Row {
	const row: Row = { to: "user", collections: ["content/notes"], proof: (w, p) => latestVisible(w, p, row, "content/notes", "title"), ...r };
	return row;
}
const WEBHOOK_ONLY = "a tenant's webhook is routed by the document's tenant; a principal's grants and tokens do not address it";

const ROW: Record<string, Row> = {
	get: notesRow({
		name: "REST get",
		current: true,
		routes: op("get"),
		async open(w, p) {
			return asked(() => inTurn(w.probes("content/notes"), (m) => w.call(p, "GET", `/content/notes/${m.id}`)));
		},
	}),
	// The same route answered from the document cache (stores/doc-cache.ts): each document read twice at once, the
	// second answer (a kept document's, with its kept body) is what the principal received.
	getKept: notesRow({
		name: "REST get, answered from the document cache",
		current: true,
		async open(w, p) {
			return asked(() =>
				inTurn(w.probes("content/notes"), async (m) => {
					await w.call(p, "GET", `/content/notes/${m.id}`);
					return w.call(p, "GET", `/content/notes/${m.id}`);
				}),
			);
		},
	}),
	list: notesRow({
		name: "REST list",
		current: true,
		routes: op("list"),
		async open(w, p) {
			return asked(async () => [await w.call(p, "GET", `/content/notes?pagination=${q({ limit: 100, sort: { id: -1 } })}`)]);
		},
	}),
	count: notesRow({
		name: "REST count",
		current: true,
		routes: op("count"),
		// A count reveals a document matching a value: each value counted is named in what the principal "received".
		async open(w, p) {
			return asked(() =>
				inTurn(
					w.probes("content/notes").flatMap((m) => Object.entries(m.fields)),
					async ([f, v]) => {
						const r = await w.t.p.http("GET", `/content/notes/count?query=${q({ [f]: v })}`, { token: p.token, headers: { "x-zone": ALL_ZONES } });
						return { what: `count ${f}=${v} → ${r.status}`, text: r.status === 200 && r.body?.total > 0 ? `counted ${v}` : r.text };
					},
				),
			);
		},
	}),
	cursor: notesRow({
		name: "REST cursor",
		current: true,
		routes: op("cursor"),
		async open(w, p) {
			return asked(async () => {
				const s = await w.stream(p, "/content/notes/cursor");
				await s.ended;
				return [streamPiece("cursor", s)];
			});
		},
	}),
	listing: notesRow({
		name: "live cursor: initial listing",
		current: true,
		routes: op("cursor"),
		async open(w, p) {
			return asked(async () => {
				const s = await w.stream(p, LIVE);
				if (s.status === 200) await s.waitFor((f) => f.event === "live" || f.event === "error", 5000).catch(() => undefined);
				s.close();
				const cut = s.text().indexOf("event: live");
				return [{ what: `live listing (HTTP ${s.status})`, text: cut < 0 ? s.text() : s.text().slice(0, cut) }];
			});
		},
	}),
	live: notesRow({
		name: "live cursor: live changes",
		routes: op("cursor"),
		open: liveReceiver,
	}),
	catchUp: notesRow({
		name: "live cursor: catch-up after the listing",
		serial: true,
		routes: op("cursor"),
		async open(w, p) {
			return catchUpReceiver(w, p);
		},
	}),
	resume: notesRow({
		name: "live cursor: resume (Last-Event-ID)",
		current: true,
		routes: op("cursor"),
		open: resumeReceiver,
	}),
	mqttTcp: notesRow({
		name: "MQTT over TCP",
		publishers: ["worker publisher", "group publisher", "worker preserver"],
		open: (w, p) => mqttReceiver(w.mqttUrl, p, mqttTopics(p)),
		proof: (w, p) => (fullReader(p) ? latestVisible(w, p, ROW.mqttTcp, "content/notes", "title") : undefined),
	}),
	mqttWs: notesRow({
		name: "MQTT over WebSocket",
		upgrades: ["/mqtt"],
		open: (w, p) => mqttReceiver(w.wsUrl, p, mqttTopics(p)),
		proof: (w, p) => (fullReader(p) ? latestVisible(w, p, ROW.mqttWs, "content/notes", "title") : undefined),
	}),
	webhooks: {
		name: "webhooks",
		to: "tenant",
		collections: "*",
		publishers: ["worker dispatcher", "group dispatcher"],
		async open(w, p) {
			return hookReceiver(w, p);
		},
		proof: (w, p) => latestVisible(w, p, ROW.webhooks, "content/notes", "title"),
		notFor: { "grant removed": WEBHOOK_ONLY, "grant narrowed": WEBHOOK_ONLY, "role removed": WEBHOOK_ONLY, logout: WEBHOOK_ONLY, "APT revoked": WEBHOOK_ONLY },
	},
	search: {
		name: "search",
		to: "user",
		collections: ["content/posts"],
		current: true,
		routes: (r) => r.engine === "special:search",
		async open(w, p) {
			return asked(async () => [await w.call(p, "GET", `/content/posts/search?q=${SEARCH_WORD}&pagination=${q({ limit: 100 })}`)]);
		},
		// `search` is a grant of its own: the members (role @editor: manage) answer 403 and must receive nothing.
		proof: (w, p) => (p.key.endsWith(".member") ? undefined : latestVisible(w, p, ROW.search, "content/posts", "title")),
	},
	populate: {
		name: "populate",
		to: "user",
		collections: ["thing/sensors", "thing/devices"],
		current: true,
		async open(w, p) {
			const byId = (m: Marker) => w.call(p, "GET", `/thing/sensors/${m.id}?populate=${q([{ path: "device", select: ["name", "description"] }])}`);
			return asked(async () => [
				await w.call(p, "GET", `/thing/sensors?populate=${q(["device"])}&pagination=${q({ limit: 100 })}`),
				...(await inTurn(w.probes("thing/sensors"), byId)),
			]);
		},
		proof: (w, p) => latestVisible(w, p, ROW.populate, "thing/devices", "name"),
	},
	specials: {
		name: "special actions' answers",
		to: "user",
		collections: "*",
		current: true,
		routes: (r) => r.def?.special !== undefined && r.engine === `special:${r.def.special.action}` && r.name in SPECIAL_CALLS,
		async open(w, p) {
			return asked(async () => {
				const calls = Object.values(SPECIAL_CALLS).flatMap((f) => f(foreign(w, p), plantedOf(w, p), p));
				return [...(await inTurn(calls, ([m, path, body]) => w.call(p, m, path, body))), await uploadPiece(w, p)];
			});
		},
		// The principals holding `resolve` on logistic/locations find their own tenant's location by its name.
		proof: (w, p) => (p.key.endsWith(".admin") || isRevocable(w, p) ? latestVisible(w, p, ROW.specials, "logistic/locations", "address") : undefined),
	},
	download: {
		name: "file downloads",
		to: "user",
		collections: ["special/files"],
		current: true,
		routes: (r) => r.def?.download === true,
		async open(w, p) {
			return asked(() =>
				inTurn(
					w.markers.filter((m) => m.col === "special/files"),
					(m) => w.call(p, "GET", `/special/files/${m.id}/download`),
				),
			);
		},
		proof: (w, p) => latestVisible(w, p, ROW.download, "special/files", "content"),
	},
	mail: {
		name: "email attachments (touch delivery)",
		to: "user",
		collections: ["special/files"],
		publishers: ["group publisher-delivery"],
		open: mailReceiver,
		proof: (w, p) => {
			const f = ownFile(w, p);
			return f && sight(p, f, ROW.mail).seen ? f.fields.content : undefined;
		},
		notFor: {
			logout: "a queued email is its owner's, not a session's: its attachments are decided with the owner's grants",
			"APT revoked": "a queued email is its owner's, not an APT's: its attachments are decided with the owner's grants",
		},
	},
	// A replay answers as the first request was answered (its kept body), so it is not held to current states.
	idempotency: notesRow({
		name: "Idempotency-Key replays",
		async open(w, p) {
			// A revocation principal keys a write of its own, to replay it after the change; the others repeat each admin's.
			const mine = isRevocable(w, p) ? { key: `matrix-${p.key}`, path: `/content/notes/${w.planted.a.openNote.id}`, body: { props: { by: p.key } } } : undefined;
			const keyed = mine ? [mine] : TENANTS.map((x) => w.planted[x].idem);
			const send = () => Promise.all(keyed.map((k) => w.call(p, "PATCH", k.path, k.body, { "idempotency-key": k.key })));
			if (mine) await send();
			return asked(send);
		},
		proof: (w, p) => (isRevocable(w, p) ? w.planted.a.openNote.fields.title : p.key.endsWith(".admin") ? plantedOf(w, p).closedNote.fields.content : undefined),
	}),
	can: {
		name: "/auth/can",
		to: "user",
		collections: ["auth/grants"],
		current: true,
		routes: (r) => r.name === "POST /auth/can",
		async open(w, p) {
			const policies = { "x-can-with-policies": "1", "x-can-with-id-policies": "1" };
			return asked(() =>
				Promise.all([
					w.call(p, "POST", "/auth/can", { action: "read", object: "content:notes" }, policies),
					w.call(p, "POST", "/auth/can", { action: "read", object: "content:tickets" }, policies),
					w.call(p, "POST", "/auth/can", { action: "read", object: "content:tickets", subjects: [`${w.t[p.tenant].limited.subject}`] }, policies),
					w.call(p, "POST", "/auth/can", { action: "read", object: "content:tickets", subjects: [`${w.t[other(p.tenant)].limited.subject}`] }, policies),
				]),
			);
		},
		proof: (w, p) => {
			const r = [...w.revoked.values()].find((x) => x.p === p);
			if (r) return r.grants[0];
			return p.key.endsWith(".admin") || p.key.endsWith(".limited") ? plantedOf(w, p).grantMark.fields.ref : undefined;
		},
	},
	writes: notesRow({
		name: "REST write answers",
		current: true,
		routes: op(...WRITE_OPS),
		async open(w, p) {
			return asked(async () => {
				const o = foreign(w, p);
				const targets = [o.openNote, o.closedNote, w.settleNote[other(p.tenant)]].filter((m): m is Marker => !!m);
				const mine = w.settleNote[p.tenant];
				const calls: Call[] = [
					...targets.flatMap((m): Call[] => [
						["PATCH", `/content/notes/${m.id}`, { props: { matrix: true } }],
						["PUT", `/content/notes/${m.id}/restore`],
						["DELETE", `/content/notes/${m.id}`],
						["DELETE", `/content/notes/${m.id}/destroy`],
						["PATCH", `/content/notes/bulk?query=${q({ title: m.fields.title })}`, { props: { matrix: true } }],
					]),
					["POST", "/content/notes", { title: `written by ${p.key}` }],
					["POST", "/content/notes/bulk", { items: [{ title: `bulk by ${p.key}` }] }],
					...(mine ? [["PATCH", `/content/notes/${mine.id}`, { props: { touched: true } }] as Call] : []),
				];
				return inTurn(calls, ([m, path, body]) => w.call(p, m, path, body));
			});
		},
		// Writers of tenant notes (admin, member, revocation principals) get the note they patched back.
		proof: (w, p) => (p.key.endsWith(".limited") ? undefined : latestVisible(w, p, ROW.writes, "content/notes", "title")),
	}),
	mcpFind: notesRow({
		name: "MCP find",
		current: true,
		routes: mcpRoutes,
		open: (w, p) => mcpReceiver(w, p, async (tool) => [await tool("find", { collection: "content/notes", zone: ALL_ZONES, pagination: { limit: 100, sort: { id: -1 } } })]),
	}),
	mcpGet: notesRow({
		name: "MCP get",
		current: true,
		routes: mcpRoutes,
		open: (w, p) => mcpReceiver(w, p, (tool) => inTurn(w.probes("content/notes"), (m) => tool("get", { collection: "content/notes", id: m.id, zone: ALL_ZONES }))),
	}),
	mcpCount: notesRow({
		name: "MCP count",
		current: true,
		routes: mcpRoutes,
		// As the REST count: a count reveals a document matching a value, so each value counted is what was received.
		open: (w, p) =>
			mcpReceiver(w, p, (tool) =>
				inTurn(
					w.probes("content/notes").flatMap((m) => Object.entries(m.fields)),
					async ([f, v]) => {
						const r = await tool("count", { collection: "content/notes", query: { [f]: v }, zone: ALL_ZONES });
						return /→ 200$/.test(r.what) && !r.text.includes('"total":0') ? { what: r.what, text: `counted ${v}` } : r;
					},
				),
			),
	}),
	mcpSearch: {
		name: "MCP search",
		to: "user",
		collections: ["content/posts"],
		current: true,
		routes: mcpRoutes,
		open: (w, p) => mcpReceiver(w, p, async (tool) => [await tool("search", { collection: "content/posts", q: SEARCH_WORD, zone: ALL_ZONES, pagination: { limit: 100 } })]),
		proof: (w, p) => (p.key.endsWith(".member") ? undefined : latestVisible(w, p, ROW.mcpSearch, "content/posts", "title")),
	},
	mcpWrites: notesRow({
		name: "MCP write answers",
		current: true,
		routes: mcpRoutes,
		open: (w, p) =>
			mcpReceiver(w, p, (tool) => {
				const o = foreign(w, p);
				const targets = [o.openNote, o.closedNote, w.settleNote[other(p.tenant)]].filter((m): m is Marker => !!m);
				const mine = w.settleNote[p.tenant];
				const note = { collection: "content/notes", zone: ALL_ZONES };
				const calls: Array<[string, Record<string, unknown>]> = [
					...targets.flatMap((m): Array<[string, Record<string, unknown>]> => [
						["update", { ...note, id: m.id, changes: { props: { matrix: true } } }],
						["restore", { ...note, id: m.id }],
						["delete", { ...note, id: m.id }],
					]),
					["create", { collection: "content/notes", document: { title: `mcp written by ${p.key}` } }],
					...(mine ? [["update", { ...note, id: mine.id, changes: { props: { touched: true } } }] as [string, Record<string, unknown>]] : []),
				];
				return inTurn(calls, ([name, args]) => tool(name, args));
			}),
		proof: (w, p) => (p.key.endsWith(".limited") ? undefined : latestVisible(w, p, ROW.mcpWrites, "content/notes", "title")),
	}),
	mcpCollections: {
		name: "MCP collections (the schema of content/notes)",
		to: "user",
		collections: ["content/notes"],
		routes: mcpRoutes,
		// The field names its schema of content/notes shows, as JSON keys (`"title":`): none the grant hides.
		open: (w, p) =>
			mcpReceiver(w, p, async (tool) => {
				const r = await tool("collections", { service: "content" });
				if (!/→ 200$/.test(r.what)) return [r];
				const all = (JSON.parse(r.text.split("\n")[0]) as { collections: Array<{ collection: string; schema: { properties: Record<string, unknown> } }> }).collections;
				const notes = all.find((c) => c.collection === "content/notes");
				return [{ what: r.what, text: JSON.stringify(Object.fromEntries(Object.keys(notes?.schema.properties ?? {}).map((f) => [f, 1]))) }];
			}),
		proof: () => undefined,
	},
	mcpCan: {
		name: "MCP can",
		to: "user",
		collections: ["auth/grants"],
		current: true,
		routes: mcpRoutes,
		open: (w, p) =>
			mcpReceiver(w, p, (tool) => {
				const policies = { with_policies: true, with_id_policies: true };
				return Promise.all([
					tool("can", { action: "read", object: "content:notes", ...policies }),
					tool("can", { action: "read", object: "content:tickets", ...policies }),
					tool("can", { action: "read", object: "content:tickets", subjects: [w.t[p.tenant].limited.subject], ...policies }),
					tool("can", { action: "read", object: "content:tickets", subjects: [w.t[other(p.tenant)].limited.subject], ...policies }),
				]);
			}),
		proof: (w, p) => ROW.can.proof(w, p),
	},
};
const ROWS: Row[] = Object.values(ROW);

/** Whether a change concerns a row: the row serves the kind of receiver the change is made to, and does not exempt it. */
const applies = (kind: ChangeKind, row: Row) => row.to === CHANGE_TO[kind] && !row.notFor?.[kind];

/** MQTT's topics for a principal: its own, its shares and its client's, for notes. */
const mqttTopics = (p: Principal) => [`platform/owner/${p.id}/content/notes/#`, `platform/share/${p.id}/content/notes/#`, `platform/client/${p.cid}/content/notes/#`];
/** A principal whose read of notes has neither a field list nor a row filter (what MQTT's SUBSCRIBE asks today). */
const fullReader = (p: Principal) => {
	const r = reachOf(p, "content/notes");
	return !!r && !r.fields && !r.rows;
};

/** How `GET /content/notes/:id` refuses a principal once its change took effect. */
const REFUSAL: Record<Exclude<ChangeKind, "grant narrowed" | "webhook config removed">, { statusCode: number; message: string; error: string }> = {
	"grant removed": { statusCode: 403, message: "no grant for read on content:notes", error: "Forbidden" },
	"role removed": { statusCode: 403, message: "no grant for read on content:notes", error: "Forbidden" },
	logout: { statusCode: 401, message: "session is revoked", error: "Unauthorized" },
	"APT revoked": { statusCode: 401, message: "session is revoked", error: "Unauthorized" },
};
/** A narrowed principal's get: the document with its id and title only, or 404 outside the narrowed rows. */
function narrowedAnswer(text: string): boolean {
	const body = JSON.parse(text);
	if (body.data) return Object.keys(body.data).sort().join() === "id,title";
	return text === JSON.stringify({ statusCode: 404, message: "document not found", error: "Not Found" });
}

// ------------------------------------------------------------------------------------------------------------------
// Exemptions: what hands out no document, with why
// ------------------------------------------------------------------------------------------------------------------

const ROUTE_EXEMPT: Record<string, string> = {
	"POST /auth/token": "issues the caller's own tokens; no stored document is in its answer",
	"GET /auth/verify": "the claims of the caller's own bearer",
	"GET /auth/logout": "ends the caller's own session; answers { result: OK }",
	"POST /auth/logout": "the same as GET /auth/logout: ends the caller's own session; answers { result: OK }",
	"GET /auth/login-blocks":
		"failed-login counters (client, user id, IP), no document: manage on identity:users, a tenant admin sees its own client's only (auth-login-blocks.test.ts)",
	"DELETE /auth/login-blocks/:id": "lifts a failed-login block; answers { result: OK }, 404 for another tenant's (auth-login-blocks.test.ts)",
	"GET /general/activities/audit":
		"the audit trail: what the tenant's own requests named (paths and document ids as its users sent them, a refused probe of another tenant's id too), never a document's content; a tenant's callers get their client's entries only, root every tenant's (ops-routes.test.ts). The matrix's view check cannot apply: an entry records what a user of the tenant typed, which another user of the tenant may read",
	"POST /auth/check": "checks a TOTP code of the caller; answers OK or NOK",
	"GET /touch/pushes/vapid": "the deployment's public VAPID key, the same for every caller",
	"GET /status": "the node's health (dependencies, workers); no document",
	"GET /metrics": "per-action and per-route counters; no document",
	"GET /api-json": "the OpenAPI document, made from the catalog",
	"GET /api-json/:service": "one service's OpenAPI document, made from the catalog",
	"GET /api": "the documentation page",
	"GET /api/assets/:name": "the documentation page's scripts and styles",
	"GET /": "links to the documentation",
	"GET /console":
		"the browser console's page: static, the same for every caller (no token read, no document); the console reaches data only through the REST routes, which have their own rows",
	"GET /console/:view*": "the browser console's page at each of its addresses (history routing): the same static page as GET /console",
	"GET /console/assets/:name": "the browser console's script and stylesheet (a fixed list of two built files); no document",
};
const PUBLISHER_EXEMPT: Record<string, string> = {
	"worker logger": "writes the audit trail to the relational store; no route or message hands it to a client",
	"group logger": "the audit trail's change entries (worker logger)",
	"worker observer": "counts changes into special/stats, which clients read through the collection's routes (the REST rows)",
	"group observer": "the counts of worker observer",
	"worker cleaner": "removes what expired; sends nothing",
	"worker watcher": "turns changes into broadcasts between nodes (grant index, revocations, CQRS caches); sends nothing to clients",
	"group watcher": "the broadcasts of worker watcher",
	"group financial.wallets": "creates a new user's wallet: a write, whose change reaches clients through the rows of its paths",
};
/** Services other than workers: the gateway's routes and the change stream's consumers are what they hand out through. */
const SERVICE_EXEMPT: Record<string, string> = {
	api: "the gateway: its routes and upgrade handlers are enumerated one by one",
	$node: "Moleculer's internal service, never routed (mappingPolicy restrict)",
	$repl: "finds principals for the operators' console (npm run repl) over the transporter (the trust zone); never routed",
};
/** Paths announced but not built: each must answer 404 until a row covers it. */
const FUTURE_PATHS: string[] = [];

// ------------------------------------------------------------------------------------------------------------------

describe("delivery paths", () => {
	let w: World;

	beforeAll(async () => {
		w = await bootWorld();
	}, 240_000);
	afterAll(async () => {
		await w?.close();
	});

	test("every route, upgrade handler, worker, consumer group and service has a row or an exemption with its reason", async () => {
		const s = surfaceOf(w.t.p, w.groups());
		const unclassified: string[] = [];
		for (const r of s.routes) {
			const rows = ROWS.filter((row) => row.routes?.(r));
			if (!rows.length && ROUTE_EXEMPT[r.name] === undefined) unclassified.push(`route ${r.name} (${r.engine ?? r.def?.action ?? "custom handler"})`);
		}
		const upgradeRows = ROWS.flatMap((r) => r.upgrades ?? []);
		if (s.upgrades !== upgradeRows.length) unclassified.push(`${s.upgrades} HTTP upgrade handlers, ${upgradeRows.length} covered by rows (${upgradeRows.join(", ")})`);
		const claims = ROWS.flatMap((r) => r.publishers ?? []);
		for (const name of [...s.workers.map((x) => `worker ${x}`), ...s.groups.map((x) => `group ${x}`)])
			if (!claims.includes(name) && PUBLISHER_EXEMPT[name] === undefined) unclassified.push(name);
		const domains = new Set(DOMAINS.map((d) => d.name));
		for (const name of s.services) if (!domains.has(name) && SERVICE_EXEMPT[name] === undefined) unclassified.push(`service ${name}`);
		for (const path of FUTURE_PATHS) {
			if (ROWS.some((r) => s.routes.some((x) => x.path.startsWith(path) && r.routes?.(x)) || r.upgrades?.includes(path))) continue;
			const res = await w.t.p.http("GET", path);
			if (res.status !== 404) unclassified.push(`${path} answers ${res.status} and no row covers it`);
		}
		expect(unclassified).toEqual([]);
		// The tables name only what exists: an exemption of something gone is removed with it.
		const names = new Set([...s.routes.map((r) => r.name), ...s.workers.map((x) => `worker ${x}`), ...s.groups.map((x) => `group ${x}`), ...s.services]);
		const stale = [...Object.keys(ROUTE_EXEMPT), ...Object.keys(PUBLISHER_EXEMPT), ...Object.keys(SERVICE_EXEMPT), ...Object.keys(SPECIAL_CALLS)].filter((n) => !names.has(n));
		expect(stale).toEqual([]);
		// A standard operation served by anything but the collection engine would be a path of its own, without a row.
		const foreignHandlers = s.routes.filter((r) => r.def?.op && r.engine !== `op:${r.def.op}`).map((r) => r.name);
		expect(foreignHandlers).toEqual([]);
	});

	describe("what each principal receives: nothing outside its view, no hidden field, no secret", () => {
		const got = new Map<string, Map<string, { pieces: Piece[]; proof?: string }>>();
		beforeAll(async () => {
			const receivers = await openRows(
				w,
				(p) => p.kind === "tenant" || !isRevocable(w, p),
				() => true,
			);
			await w.burst("view");
			await w.settle();
			await takeRows(w, receivers, got);
			await closeRows(receivers);
		}, 180_000);

		test.each(ROWS.map((r) => [r.name, r] as const))("%s", (_name, row) => {
			const seen = got.get(row.name)!;
			const problems = [...seen.entries()].flatMap(([key, r]) => problemsOf(w, w.byKey.get(key)!, row, r.pieces, r.proof));
			expect(problems).toEqual([]);
		});
	});

	describe(`revocations take effect on every row within ${EFFECT_MS} ms`, () => {
		const before = new Map<string, Map<string, { pieces: Piece[]; proof?: string }>>();
		const after = new Map<string, Map<string, { pieces: Piece[]; proof?: string }>>();
		const beforeProblems = new Map<string, string[]>();
		beforeAll(async () => {
			const changed = [...w.revoked.values()];
			const principals = new Set(changed.map((r) => r.p));
			const kindOf = (p: Principal) => changed.find((r) => r.p === p)!.kind;
			const receivers = await openRows(
				w,
				(p) => principals.has(p),
				(row, p) => applies(kindOf(p), row),
			);
			await w.burst("pre");
			await w.settle();
			await takeRows(w, receivers, before);
			for (const [row, byKey] of before)
				for (const [key, r] of byKey)
					beforeProblems.set(
						`${row} ${key}`,
						problemsOf(
							w,
							w.byKey.get(key)!,
							ROWS.find((x) => x.name === row)!,
							r.pieces,
							r.proof,
						),
					);
			const applied = await Promise.all(changed.map(async (r) => (await r.apply(), Date.now())));
			await sleep(Math.max(...applied) + EFFECT_MS - Date.now());
			// What arrived within the 2 s is allowed; from here on nothing may.
			await Promise.all([...receivers.values()].flatMap((m) => [...m.values()].map((rc) => (rc.skip ? rc.skip() : undefined))));
			await w.burst("post");
			await w.settle();
			await takeRows(w, receivers, after, true);
			await closeRows(receivers);
		}, 180_000);

		// A principal whose change took effect is refused as the platform refuses anyone: exactly, never with a 5xx.
		test.each(USER_CHANGES)("%s: REST get then answers exactly its refusal", (kind) => {
			const p = w.revoked.get(kind)!.p;
			const answers = after
				.get(ROW.get.name)!
				.get(p.key)!
				.pieces.map((x) => x.text);
			const allowed = kind === "grant narrowed" ? undefined : JSON.stringify(REFUSAL[kind as keyof typeof REFUSAL]);
			const wrong = answers.filter((text) => (allowed ? text !== allowed : !narrowedAnswer(text)));
			expect(wrong).toEqual([]);
		});

		// Each change on each row it concerns (the others say why in `notFor`, or serve another kind of receiver).
		const cases = CHANGES.flatMap((kind) => ROWS.filter((row) => applies(kind, row)).map((row) => [kind, row.name, row] as const));
		test.each(cases)("%s: %s", (kind, _name, row) => {
			const p = w.revoked.get(kind)!.p;
			const a = after.get(row.name)!.get(p.key)!;
			expect({ before: beforeProblems.get(`${row.name} ${p.key}`), after: problemsOf(w, p, row, a.pieces, undefined) }).toEqual({ before: [], after: [] });
		});
	});
});

// ------------------------------------------------------------------------------------------------------------------
// Running the rows
// ------------------------------------------------------------------------------------------------------------------

type Opened = Map<string, Map<string, Receiver>>;

/** Opens every row for every principal `who` admits (and `also` admits for that row), all at once. */
async function openRows(w: World, who: (p: Principal) => boolean, also: (row: Row, p: Principal) => boolean): Promise<Opened> {
	const out: Opened = new Map();
	await Promise.all(
		ROWS.map(async (row) => {
			const m = new Map<string, Receiver>();
			out.set(row.name, m);
			await Promise.all(w.principals.filter((p) => p.kind === row.to && who(p) && also(row, p)).map(async (p) => m.set(p.key, await row.open(w, p))));
		}),
	);
	return out;
}

/**
 * Takes every receiver: the rows at once, then the serial rows one principal at a time. The proof each must show is
 * decided at its take (`after`: none, the principal may no longer see it); the serial rows' after their take, since they
 * write it themselves.
 */
async function takeRows(w: World, receivers: Opened, into: Map<string, Map<string, { pieces: Piece[]; proof?: string }>>, after = false): Promise<void> {
	const take = async (row: Row, key: string, rc: Receiver) => {
		const p = w.byKey.get(key)!;
		const proof = after ? undefined : row.proof(w, p);
		const pieces = await rc.take(proof);
		into.get(row.name)!.set(key, { pieces, proof: after ? undefined : row.serial ? row.proof(w, p) : proof });
	};
	for (const row of ROWS) into.set(row.name, new Map());
	const all = ROWS.filter((r) => !r.serial).flatMap((row) => [...receivers.get(row.name)!].map(([key, rc]) => [row, key, rc] as const));
	await inTurn(all, ([row, key, rc]) => take(row, key, rc), 12);
	for (const row of ROWS.filter((r) => r.serial)) for (const [key, rc] of receivers.get(row.name)!) await take(row, key, rc);
}

async function closeRows(receivers: Opened): Promise<void> {
	await Promise.all([...receivers.values()].flatMap((m) => [...m.values()].map((rc) => rc.close())));
}
