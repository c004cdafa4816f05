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
 *
 * A streamed body (the multipart upload, services/api/files.ts) is claimed in two phases: before it is read, under a
 * provisional fingerprint of what is known (method, path, query: the record's `pre`), then completed from its parsed
 * parts once the body is read (`completeStreamed`). A repeat reads its body only to compare (nothing is stored) and
 * replays, or answers 422 when its completed fingerprint differs.
 */
import { createHash, randomBytes } from "crypto";
import type { IncomingMessage, ServerResponse } from "http";
import type { Context } from "moleculer";
import type { PlatformConfig } from "../../runtime/config";
import { ApiError, badRequest, toErrorBody } from "../../lib/errors";
import { Aes, IDEMPOTENT_ANSWERS } from "../../lib/crypto";
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

/**
 * A keyed streamed request whose body is not read yet: either `run` (this request claimed the key and runs) or `rec`
 * (a repeat of a request that answered, or whose write committed: its body is read only to be compared).
 */
export interface StreamedClaim {
	store: DocumentStore;
	/** The provisional fingerprint (method, path, query). */
	pre: string;
	run?: Run;
	rec?: IdemRecord;
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

/** The request's fingerprint: method, path, query and `body` (the parsed JSON body, or a streamed body's parts). */
function fingerprint(req: Req, body: unknown = req.$params?.body ?? null): string {
	const path = (req.originalUrl ?? req.url ?? "").split("?")[0].replace(/(.)\/$/, "$1");
	return sha(canonical([req.method, path, req.$params?.query ?? {}, body]));
}

function principalOf(token: Token): string | undefined {
	if (!token) return undefined;
	return token.uid ? `u:${token.uid}` : token.aid ? `a:${token.aid}` : token.cid ? `c:${token.cid}` : undefined;
}

/** `service/collection` of a collection action name (`content.notes.create`). */
const collectionOf = (action: string) => action.split(".").slice(0, 2).join("/");

export class Idempotency {
	readonly records: IdempotencyStoreRef;

	/**
	 * Kept answers are sealed at rest: a creation's answer may carry a secret shown only once (a client's secret, an
	 * API token, a TOTP secret), which must never lie in the store in clear.
	 */
	private readonly seal: Aes;

	constructor(private readonly cfg: PlatformConfig, aesSecret: string) {
		this.records = new IdempotencyStoreRef(cfg);
		this.seal = Aes.forPurpose(aesSecret, IDEMPOTENT_ANSWERS);
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
		const who = principalOf(req.$ctx.meta.token);
		if (key === undefined || !who) return call();
		const store = await this.records.get();
		const fp = fingerprint(req);
		const { run, rec } = await this.claim(req, store, sha(`${who}\n${key}`), action, { fp }, (r) => r.fp === fp);
		if (!run) return this.replay(req, res, store, rec!);
		const { id, attempt } = run;
		req.$idempotency = run;
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

	/**
	 * Claims the key for a new attempt of this request (passed to the domain in `ctx.meta.idempotency`), or answers the
	 * record a repeat replays (done, or committed with its gateway's lease over); 422 when `same` says the record is
	 * another request's, 409 while it runs. `fields` are the fingerprint fields of a fresh record (and of a takeover).
	 */
	private async claim(req: Req, store: DocumentStore, id: string, action: string, fields: { fp: string; pre?: string }, same: (rec: IdemRecord) => boolean): Promise<{ run?: Run; rec?: IdemRecord }> {
		const attempt = randomBytes(12).toString("base64url");
		for (let tries = 0; ; tries++) {
			const rec = (await store.findOne({ _id: id })) as IdemRecord | null;
			const now = Date.now();
			const lease = now + this.leaseMs;
			let claimed = false;
			if (!rec || rec.at < now - IDEMPOTENCY_TTL_MS) {
				const fresh: IdemRecord = { _id: id, ...fields, action, state: "running", attempt, lease, at: now };
				claimed = rec ? !!(await store.replaceIf({ _id: id, at: rec.at }, fresh)) : await store.insert(fresh).then(() => true, (err) => (isDuplicateKeyError(err) ? false : Promise.reject(err)));
			} else if (!same(rec)) throw new ApiError(422, KEY_REUSED);
			else if (rec.state === "done") return { rec };
			else if (rec.lease > now) throw new ApiError(409, IN_PROGRESS);
			else if (rec.state === "committed") return { rec };
			// A running claim whose gateway gave it up (5xx) or died: taken over under a new attempt.
			else claimed = !!(await store.updateIf({ _id: id, attempt: rec.attempt, state: "running" }, { $set: { ...fields, attempt, lease } }));
			if (claimed) break;
			if (tries >= 3) throw new ApiError(409, IN_PROGRESS);
		}
		req.$ctx.meta.idempotency = { id, attempt, col: collectionOf(action) } satisfies IdemMeta;
		return { run: { store, id, attempt, kept: false } };
	}

	/**
	 * Phase one of a keyed streamed request (the upload), before its body is read: claims the key under the provisional
	 * fingerprint (method, path, query), or finds the record a repeat answers from. 422 when the key belongs to another
	 * method, path or query (or to a JSON request), 409 while its first request runs. Undefined without a key.
	 */
	async claimStreamed(req: Req, action: string): Promise<StreamedClaim | undefined> {
		const key = idempotencyKeyOf(req);
		const who = principalOf(req.$ctx.meta.token);
		if (key === undefined || !who) return undefined;
		const store = await this.records.get();
		const pre = fingerprint(req, "streamed");
		return { store, pre, ...(await this.claim(req, store, sha(`${who}\n${key}`), action, { fp: pre, pre }, (rec) => rec.pre === pre)) };
	}

	/** The completed fingerprint of a streamed request: method, path, query and its parsed `parts`. */
	streamedFingerprint(req: Req, parts: unknown[]): string {
		return fingerprint(req, { streamed: parts });
	}

	/** A claimed streamed request's lease renewed, between its parts (a long upload may outlast one lease). */
	async renewStreamed(claim: StreamedClaim): Promise<void> {
		const run = claim.run;
		if (run) await run.store.updateIf({ _id: run.id, attempt: run.attempt }, { $set: { lease: Date.now() + this.leaseMs } });
	}

	/**
	 * Phase two of a claimed streamed request, before its answer leaves. `fp` is its completed fingerprint, undefined
	 * when the body was not read to its end (an early answer: 413, 403...); `ids` the documents it wrote.
	 * - below 500 with `fp`: the answer is kept under it;
	 * - below 500 without `fp`: when nothing was written the key is given back (a retry runs afresh: the body that
	 *   was answered early cannot be compared); else the answer is kept, and any repeat of method, path and query
	 *   replays it;
	 * - 5xx: the lease is given up (a retry takes over, or replays what was committed).
	 */
	async completeStreamed(claim: StreamedClaim, status: number, data: unknown, fp: string | undefined, ids: string[]): Promise<void> {
		const run = claim.run;
		if (!run) return;
		const extra = { ...(ids.length ? { ref: { ids } } : {}), ...(fp ? { fp } : {}) };
		if (status >= 500) {
			await run.store.updateIf({ _id: run.id, attempt: run.attempt }, { $set: { ...extra, lease: 0 } }).catch(() => undefined);
			return;
		}
		if (!fp && !ids.length && (await run.store.removeMany({ _id: run.id, attempt: run.attempt, state: "running" }))) return;
		await this.keep(run, status, data, {}, extra);
	}

	/**
	 * A repeat of a streamed request (`claim.rec`): its kept answer when `fp`, its completed fingerprint, is the
	 * record's (or the record's is only provisional: its first request was answered before its body was read), else 422.
	 */
	async replayStreamed(req: Req, res: ServerResponse, claim: StreamedClaim, fp: string | undefined): Promise<void> {
		const rec = claim.rec!;
		if (rec.fp !== claim.pre && rec.fp !== fp) throw new ApiError(422, KEY_REUSED);
		await this.replay(req, res, claim.store, rec);
	}

	/** Whether a repeat's body must be read before it is answered: only to compare its completed fingerprint. */
	static comparesBody(claim: StreamedClaim): boolean {
		return !!claim.rec && claim.rec.fp !== claim.pre;
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

	private async keep(run: Run, status: number, data: unknown, headers: Record<string, string>, extra: Record<string, unknown> = {}): Promise<void> {
		run.kept = true;
		const text = JSON.stringify(data ?? null);
		const body = Buffer.byteLength(text) <= MAX_KEPT_BODY ? { body: this.seal.encrypt(text) } : { digest: sha(text) };
		// Under this attempt only: a run fenced out by a retry (its write refused with 409) keeps nothing.
		await run.store.updateIf({ _id: run.id, attempt: run.attempt }, { $set: { ...extra, state: "done", status, ...body, headers: JSON.stringify(headers), lease: 0 } });
	}

	/** The kept answer again; rebuilt by re-reading when only its digest was kept or its node died before keeping it. */
	private async replay(req: Req, res: ServerResponse, store: DocumentStore, rec: IdemRecord): Promise<true> {
		// A body that does not open (kept under another key) is rebuilt like a digest.
		let text = rec.body === undefined ? undefined : (this.seal.decrypt(rec.body) ?? undefined);
		let status = rec.status ?? 200;
		if (text === undefined) {
			text = JSON.stringify(await this.reread(req, rec));
			// A committed record whose answer was lost: kept now, so the next repeat does not read again.
			if (rec.state === "committed") await store.updateIf({ _id: rec._id, attempt: rec.attempt, state: "committed" }, { $set: { state: "done", status, body: this.seal.encrypt(text), headers: "{}" } });
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
		if (op === "bulkCreate" || op === "upload") {
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
