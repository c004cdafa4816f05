/**
 * `Idempotency-Key` at the gateway (CONTRACTS.md "Retries and concurrent writers"; the record and the domain's fence:
 * mixins/idempotency-record.ts). A keyed POST, PATCH, PUT or DELETE of an authenticated route:
 * - claims the key for its principal (record `running`, a fresh attempt, a lease), then runs, passing the attempt in
 *   `ctx.meta.idempotency` so that the domain's write commits the record with it;
 * - keeps its answer (status below 500: status, body up to 64 KB else a digest, the headers to repeat) for 24 hours;
 * - answers 5xx without keeping, and gives its lease up at once: a retry takes the key over with a new attempt, and
 *   the first attempt's write, should it still arrive, is refused by the fence (so never two writes);
 * - a repeat (same method, path, query, body) replays the kept answer with `Idempotent-Replayed: true`; another
 *   request under the key: 422; a repeat while the first runs: 409. A committed record without a kept answer (the
 *   node died after its commit) or with a digest only: the answer is rebuilt by re-reading the written document.
 */
import { createHash, randomBytes } from "crypto";
import type { IncomingMessage, ServerResponse } from "http";
import type { Context } from "moleculer";
import type { PlatformConfig } from "../../lib/config";
import { ApiError, badRequest, toErrorBody } from "../../lib/errors";
import { isDuplicateKeyError, type DocumentStore } from "../../mixins/stores";
import { IDEMPOTENCY_TTL_MS, IN_PROGRESS, KEY_REUSED, IdempotencyStoreRef, type IdemMeta, type IdemRecord } from "../../mixins/idempotency-record";

export const IDEMPOTENCY_HEADER = "idempotency-key";
export const REPLAYED_HEADER = "Idempotent-Replayed";
/** A kept body larger than this keeps its digest only; a replay then re-reads the document. */
export const MAX_KEPT_BODY = 64 * 1024;
const KEYED_METHODS = new Set(["POST", "PATCH", "PUT", "DELETE"]);
const KEY_SYNTAX = /^[\x20-\x7e]{1,255}$/;
/** Response headers that are part of an answer (the body's own headers are made again). */
const KEPT_HEADERS = /^(x-saga-session|etag|location)$/i;

type Req = IncomingMessage & { $ctx: Context<any, any>; $params?: any; originalUrl?: string; $idempotency?: Run };
type Token = { uid?: string; aid?: string; cid?: string } | undefined;

/** One keyed request being run by this gateway. */
interface Run {
	store: DocumentStore;
	id: string;
	attempt: string;
	kept: boolean;
}

/** The request's key: undefined when it has none (or its method takes none); 400 when it is not 1-255 printable ASCII. */
export function idempotencyKeyOf(req: IncomingMessage): string | undefined {
	if (!KEYED_METHODS.has(req.method ?? "")) return undefined;
	const raw = req.headers[IDEMPOTENCY_HEADER];
	if (raw === undefined) return undefined;
	const key = Array.isArray(raw) ? raw.join(", ") : raw;
	if (!KEY_SYNTAX.test(key)) throw badRequest("Idempotency-Key must be 1 to 255 printable ASCII characters");
	return key;
}

const sha = (text: string) => createHash("sha256").update(text).digest("base64url");

/** JSON with object keys sorted: the same request hashes the same whatever its key order. */
function canonical(v: unknown): string {
	if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
	if (v && typeof v === "object")
		return `{${Object.keys(v)
			.sort()
			.filter((k) => (v as Record<string, unknown>)[k] !== undefined)
			.map((k) => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`)
			.join(",")}}`;
	return JSON.stringify(v) ?? "null";
}

function fingerprint(req: Req): string {
	const path = (req.originalUrl ?? req.url ?? "").split("?")[0].replace(/(.)\/$/, "$1");
	const p = req.$params ?? {};
	return sha(canonical([req.method, path, p.query ?? {}, p.body ?? null]));
}

function principalOf(token: Token): string | undefined {
	if (!token) return undefined;
	return token.uid ? `u:${token.uid}` : token.aid ? `a:${token.aid}` : token.cid ? `c:${token.cid}` : undefined;
}

/** `service/collection` of a collection action name (`content.notes.create`). */
const collectionOf = (action: string) => action.split(".").slice(0, 2).join("/");

export class Idempotency {
	readonly records: IdempotencyStoreRef;

	constructor(private readonly cfg: PlatformConfig) {
		this.records = new IdempotencyStoreRef(cfg);
	}

	private get leaseMs(): number {
		return this.cfg.requestTimeoutMs + 5_000;
	}

	/**
	 * Runs `call` (moleculer-web's callAction: the action, onAfterCall, the answer) under the request's key, or replays
	 * the key's answer; without a key (or a principal), just `call`.
	 */
	async around(req: Req, res: ServerResponse, action: string, call: () => Promise<unknown>): Promise<unknown> {
		const key = idempotencyKeyOf(req);
		const ctx = req.$ctx;
		const who = principalOf(ctx.meta.token);
		if (key === undefined || !who) return call();
		const store = await this.records.get();
		const id = sha(`${who}\n${key}`);
		const fp = fingerprint(req);
		const attempt = randomBytes(12).toString("base64url");
		for (let tries = 0; ; tries++) {
			const rec = (await store.findOne({ _id: id })) as IdemRecord | null;
			const now = Date.now();
			const lease = now + this.leaseMs;
			let claimed = false;
			if (!rec || rec.at < now - IDEMPOTENCY_TTL_MS) {
				const fresh: IdemRecord = { _id: id, fp, action, state: "running", attempt, lease, at: now };
				claimed = rec ? !!(await store.replaceIf({ _id: id, at: rec.at }, fresh)) : await store.insert(fresh).then(() => true, (err) => (isDuplicateKeyError(err) ? false : Promise.reject(err)));
			} else if (rec.fp !== fp) throw new ApiError(422, KEY_REUSED);
			else if (rec.state === "done") return this.replay(req, res, store, rec);
			else if (rec.lease > now) throw new ApiError(409, IN_PROGRESS);
			else if (rec.state === "committed") return this.replay(req, res, store, rec);
			// A running claim whose gateway gave it up (5xx) or died: taken over under a new attempt.
			else claimed = !!(await store.updateIf({ _id: id, attempt: rec.attempt, state: "running" }, { $set: { attempt, lease } }));
			if (claimed) break;
			if (tries >= 3) throw new ApiError(409, IN_PROGRESS);
		}
		const run: Run = { store, id, attempt, kept: false };
		req.$idempotency = run;
		ctx.meta.idempotency = { id, attempt, col: collectionOf(action) } satisfies IdemMeta;
		try {
			return await call();
		} catch (err) {
			const body = toErrorBody(err);
			if (body.statusCode < 500) await this.keep(run, body.statusCode, body, {});
			// Given up at once: a retry takes over (the fence refuses this attempt's write if it still comes).
			else await store.updateIf({ _id: id, attempt }, { $set: { lease: 0 } }).catch(() => undefined);
			throw err;
		}
	}

	/** onAfterCall: keeps the answer of a keyed request before it is sent. */
	async answered(req: Req, status: number, data: unknown): Promise<void> {
		const run = req.$idempotency;
		if (!run || run.kept) return;
		const meta = req.$ctx.meta;
		const headers: Record<string, string> = {};
		for (const [k, v] of Object.entries((meta.$responseHeaders ?? {}) as Record<string, unknown>)) if (KEPT_HEADERS.test(k) && typeof v === "string") headers[k] = v;
		if (typeof meta.$location === "string") headers.Location = meta.$location;
		await this.keep(run, status, data, headers);
	}

	private async keep(run: Run, status: number, data: unknown, headers: Record<string, string>): Promise<void> {
		run.kept = true;
		const text = JSON.stringify(data ?? null);
		const body = Buffer.byteLength(text) <= MAX_KEPT_BODY ? { body: text } : { digest: sha(text) };
		// Under this attempt only: a run fenced out by a retry (its write refused with 409) keeps nothing.
		await run.store.updateIf({ _id: run.id, attempt: run.attempt }, { $set: { state: "done", status, ...body, headers: JSON.stringify(headers), lease: 0 } });
	}

	/** The kept answer again; rebuilt by re-reading when only its digest was kept or its node died before keeping it. */
	private async replay(req: Req, res: ServerResponse, store: DocumentStore, rec: IdemRecord): Promise<true> {
		let text = rec.body;
		let status = rec.status ?? 200;
		if (text === undefined) {
			text = JSON.stringify(await this.reread(req, rec));
			// A committed record whose answer was lost: kept now, so the next repeat does not read again.
			if (rec.state === "committed") await store.updateIf({ _id: rec._id, attempt: rec.attempt, state: "committed" }, { $set: { state: "done", status, body: text, headers: "{}" } });
		}
		const headers = JSON.parse(rec.headers ?? "{}") as Record<string, string>;
		res.writeHead(status, { ...headers, "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text), [REPLAYED_HEADER]: "true" });
		res.end(text);
		return true;
	}

	/**
	 * What the request wrote, as its caller reads it now: the documents of a bulk create as `{ items, total }`, else the
	 * document the route addresses (`:id`) or the first one it wrote as `{ data }` (`{ data: { id } }` when it can no
	 * longer be read: deleted, destroyed).
	 */
	private async reread(req: Req, rec: IdemRecord): Promise<unknown> {
		const ctx = req.$ctx;
		const [service, collection, op] = rec.action.split(".");
		const ids = rec.ref?.ids ?? [];
		const base = `${service}.${collection}`;
		if (op === "bulkCreate") {
			const found = (await ctx.call(`${base}.list`, { query: { query: JSON.stringify({ id: { $in: ids } }), pagination: JSON.stringify({ limit: ids.length || 1 }) } })) as { items: unknown[] };
			return { items: found.items, total: found.items.length };
		}
		const id = typeof req.$params?.params?.id === "string" ? req.$params.params.id : ids[0];
		if (id === undefined) return {};
		try {
			return await ctx.call(`${base}.get`, { params: { id } });
		} catch {
			return { data: { id } };
		}
	}
}
