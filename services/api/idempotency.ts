/**
 * `Idempotency-Key` at the gateway (docs/contracts.md "Retries and concurrent writers"; the record and the domain's fence:
 * engine/idempotency-record.ts). A keyed POST, PATCH, PUT or DELETE of an authenticated route:
 * - claims the key for its principal (record `running`, a fresh attempt, a lease), then runs, passing the attempt in
 *   `ctx.meta.idempotency` so that the domain's write commits the record with it;
 * - holds the key while it runs: a short lease (HEARTBEAT_TIMEOUT_MS) renewed every HEARTBEAT_INTERVAL_MS, under the
 *   record's owner (the gateway's node id and its broker's instance id). A retry finds the lease over within a heartbeat
 *   timeout of its gateway's death, and at once when the cluster already knows that owner gone (`Owner.gone`: its node
 *   disconnected, or restarted as a new instance, this gateway included): it then takes the key over or replays;
 * - keeps its answer (status below 500: status, body up to 64 KB else a digest, the headers to repeat) for 24 hours;
 * - answers 5xx without keeping, and gives its lease up at once: a retry takes the key over with a new attempt, and
 *   the first attempt's write, should it still arrive, is refused by the fence (so never two writes);
 * - a repeat (same method, path, query, body) replays the kept answer with `Idempotent-Replayed: true`; another
 *   request under the key: 422; a repeat while the first runs: 409. A committed record without a kept answer (the
 *   node died after its commit) or with a digest only: the answer is rebuilt by re-reading the written document.
 *
 * A request that finds its key taken (a repeat, another request, one still running) is first decided like the request
 * itself: the routed action takes its authority decision for the caller now (scope, grant, query enforcement and
 * zones: authority/authority.ts, `DECIDE_ONLY`) and answers it without running. Its 401 or 403 is the answer; only a
 * caller who may make the request learns anything of the key. The kept answer is then replayed as it was kept, except
 * (rebuilt by re-reading, as the caller sees it now) when it holds a value shown once (a client's secret, an APT, a
 * share key: `SHOWN_ONCE`) and the caller is not the session that made the first request, or when it shows a field of
 * the routed collection that the caller's decision does not allow.
 *
 * A streamed body (the multipart upload, services/api/files.ts) is claimed in two phases: before it is read, under a
 * provisional fingerprint of what is known (method, path, query: the record's `pre`), then completed from its parsed
 * parts once the body is read (`completeStreamed`). A repeat reads its body only to compare (nothing is stored) and
 * replays, or answers 422 when its completed fingerprint differs.
 */
import { createHash, randomBytes } from "crypto";
import type { IncomingMessage, ServerResponse } from "http";
import type { PlatformConfig } from "../../runtime/config";
import { ApiError, badRequest, toErrorBody } from "../../lib/errors";
import { Aes, IDEMPOTENT_ANSWERS } from "../../lib/crypto";
import { findCollection } from "../../catalog";
import { fieldsAllowed } from "../../lib/grants";
import { writeOnlyFields } from "../../lib/present";
import { allRoutes } from "../../lib/routes";
import { principalOf } from "../../lib/types";
import { isDuplicateKeyError, type DocumentStore } from "../../stores";
import { endAnswer } from "./early-answer";
import { IDEMPOTENCY_TTL_MS, IN_PROGRESS, KEY_REUSED, SHOWN_ONCE, IdempotencyStoreRef, type IdemMeta, type IdemRecord } from "../../engine/idempotency-record";
import { DECIDE_ONLY, type Decided } from "../../authority/authority";
import type { GatewayRequest } from "./web";

export const IDEMPOTENCY_HEADER = "idempotency-key";
export const REPLAYED_HEADER = "Idempotent-Replayed";
/** A kept body larger than this keeps its digest only; a replay then re-reads the document. */
export const MAX_KEPT_BODY = 64 * 1024;
const KEYED_METHODS = new Set(["POST", "PATCH", "PUT", "DELETE"]);
const KEY_SYNTAX = /^[\x20-\x7e]{1,255}$/;
/** Response headers that are part of an answer (the body's own headers are made again). */
const KEPT_HEADERS = /^(x-saga-session|etag|location)$/i;

/** A request the gateway keeps answers of: its run under its key once claimed. */
export type IdempotentRequest = GatewayRequest & { $idempotency?: Run };
type Req = IdempotentRequest;
type Token = { uid?: string; aid?: string; cid?: string; session?: string } | undefined;
/** How the gateway accounts for an answer it writes itself (metrics, the request's audit entry). */
export type AnswerHook = (req: Req, status: number, data: unknown) => void;
/** The caller's response fields for the request (null: every field), from its authority decision. */
type Fields = string[] | null;

/** Ops whose answer is the routed collection's documents as the plan presents them: `{ data }`, or `{ items }` (bulk). */
const DOCUMENT_ANSWERS = new Set(["create", "patch", "remove", "restore", "destroy", "bulkCreate"]);

/** Actions whose routes carry a scope: the authority layer decides them. Token-only routes are decided by authentication. */
let guarded: Set<string> | undefined;
const isGuarded = (action: string) =>
	(guarded ??= new Set(
		allRoutes()
			.filter((r) => r.scope !== undefined)
			.map((r) => r.action),
	)).has(action);

/** One keyed request being run by this gateway. */
interface Run {
	store: DocumentStore;
	id: string;
	attempt: string;
	kept: boolean;
	/** Renews the lease while the request runs. */
	timer?: NodeJS.Timeout;
	/** The renewal in flight: the lease's last write waits for it, so a renewal never lands after it. */
	renewing?: Promise<unknown>;
}

/** Who holds a key: this gateway's node and broker instance, and what the cluster knows of another holder. */
export interface Owner {
	node: string;
	inst: string;
	/** Whether the holder `node`/`inst` is known gone: its node disconnected, or it runs as another instance now. */
	gone(node: string, inst: string): boolean;
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
	/** With `rec`: the caller's decision for the request. */
	fields?: Fields;
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

/** The record's mark of the session (a login, or an APT's own session) whose token runs the request. */
const sessionMark = (token: Token) => (typeof token?.session === "string" ? sha(`session\n${token.session}`) : undefined);

/**
 * Whether every document of a kept answer shows only fields of `fields` (the caller's decision); `id` always. A
 * write-only or internal field in a kept answer can only be a value shown once (the `once` rule governs it).
 */
function showsOnly(action: string, body: unknown, fields: Fields): boolean {
	const [service, collection, op] = action.split(".");
	if (fields === null || !DOCUMENT_ANSWERS.has(op)) return true;
	const col = findCollection(service, collection)?.collection;
	const once = col ? writeOnlyFields(col) : [];
	const b = body as { data?: unknown; items?: unknown } | null;
	const docs = Array.isArray(b?.items) ? b.items : b?.data !== undefined ? [b.data] : [];
	return docs.every(
		(d) =>
			!!d &&
			typeof d === "object" &&
			fieldsAllowed(
				Object.keys(d).filter((k) => !once.includes(k)),
				fields,
			).length === 0,
	);
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

	constructor(
		private readonly cfg: PlatformConfig,
		aesSecret: string,
		private readonly opts: { onAnswer: AnswerHook; owner: Owner },
	) {
		this.records = new IdempotencyStoreRef(cfg);
		this.seal = Aes.forPurpose(aesSecret, IDEMPOTENT_ANSWERS);
	}

	/** The records' store, under the request's deadline (REQUEST_DB_DEADLINE_MS): it is read and written for a request. */
	private async requestStore(): Promise<DocumentStore> {
		const store = await this.records.get();
		return store.within?.(this.cfg.requestDbDeadlineMs) ?? store;
	}

	/** A gateway that has not renewed its lease for a heartbeat timeout is gone, as the cluster counts its nodes. */
	private get leaseMs(): number {
		return this.cfg.heartbeatTimeoutMs;
	}

	/** Whether the record's holder is known gone (its lease, however long it still runs, then holds nothing). */
	private holderGone(rec: IdemRecord): boolean {
		return typeof rec.node === "string" && typeof rec.inst === "string" && this.opts.owner.gone(rec.node, rec.inst);
	}

	/** Renews the run's lease every heartbeat interval until `release` (or until the record is no longer the run's). */
	private hold(run: Run): void {
		const timer = setInterval(() => {
			const renewal = run.store.updateIf({ id: run.id, attempt: run.attempt, state: { $in: ["running", "committed"] } }, { $set: { lease: Date.now() + this.leaseMs } });
			run.renewing = renewal.then(
				(held) => {
					if (!held) clearInterval(timer);
				},
				() => undefined,
			);
		}, this.cfg.heartbeatIntervalMs);
		timer.unref();
		run.timer = timer;
	}

	/** Stops renewing the run's lease; resolves once no renewal is in flight (the lease's last write comes after). */
	private async release(run: Run): Promise<void> {
		clearInterval(run.timer);
		await run.renewing;
	}

	/**
	 * Runs `call` (moleculer-web's callAction: the action, onAfterCall, the answer) under the request's key, or replays
	 * the key's answer; without a key (or a principal), just `call`.
	 */
	async around(req: Req, res: ServerResponse, action: string, call: () => Promise<unknown>): Promise<unknown> {
		const key = idempotencyKeyOf(req);
		const who = principalOf(req.$ctx.meta.token);
		if (key === undefined || !who) return call();
		const store = await this.requestStore();
		const fp = fingerprint(req);
		const { run, rec, fields } = await this.claim(req, store, sha(`${who}\n${key}`), action, { fp }, (r) => r.fp === fp);
		if (!run) return this.replay(req, res, store, rec!, fields!);
		req.$idempotency = run;
		try {
			return await call();
		} catch (err) {
			const body = toErrorBody(err);
			if (body.statusCode < 500) await this.keep(run, body.statusCode, body, {});
			else await this.giveUp(run);
			throw err;
		} finally {
			clearInterval(run.timer);
		}
	}

	/** Gives the lease up at once (a 5xx): a retry takes over (the fence refuses this attempt's write if it still comes). */
	private async giveUp(run: Run, extra: Record<string, unknown> = {}): Promise<void> {
		await this.release(run);
		await run.store.updateIf({ id: run.id, attempt: run.attempt }, { $set: { ...extra, lease: 0 } }).catch(() => undefined);
	}

	/**
	 * Claims the key for a new attempt of this request (passed to the domain in `ctx.meta.idempotency`), or answers the
	 * record a repeat replays (done, or committed with its gateway's lease over) with the caller's decision; 422 when
	 * `same` says the record is another request's, 409 while it runs. A key found taken is answered only to a caller
	 * the request's authority decision admits (`decide`: its 401 or 403 first). `fp` holds the fingerprint fields of a
	 * fresh record (and of a takeover).
	 */
	private async claim(
		req: Req,
		store: DocumentStore,
		id: string,
		action: string,
		fp: { fp: string; pre?: string },
		same: (rec: IdemRecord) => boolean,
	): Promise<{ run?: Run; rec?: IdemRecord; fields?: Fields }> {
		const attempt = randomBytes(12).toString("base64url");
		const by = sessionMark(req.$ctx.meta.token);
		const owner = { node: this.opts.owner.node, inst: this.opts.owner.inst };
		let decision: Promise<Fields> | undefined;
		const decide = () => (decision ??= this.decide(req, action));
		for (let tries = 0; ; tries++) {
			const rec = (await store.findOne({ id })) as IdemRecord | null;
			const now = Date.now();
			const lease = now + this.leaseMs;
			let claimed = false;
			if (!rec || rec.at < now - IDEMPOTENCY_TTL_MS) {
				const fresh: IdemRecord = { id, ...fp, action, state: "running", attempt, lease, at: now, ...owner, ...(by ? { by } : {}) };
				claimed = rec
					? !!(await store.replaceIf({ id, at: rec.at }, fresh))
					: await store.insert(fresh).then(
							() => true,
							(err) => (isDuplicateKeyError(err) ? false : Promise.reject(err)),
						);
			} else {
				const fields = await decide();
				if (!same(rec)) throw new ApiError(422, KEY_REUSED);
				else if (rec.state === "done") return { rec, fields };
				else if (rec.lease > now && !this.holderGone(rec)) throw new ApiError(409, IN_PROGRESS);
				else if (rec.state === "committed") return { rec, fields };
				// A running claim whose gateway gave it up (5xx) or is gone: taken over under a new attempt.
				else
					claimed = !!(await store.updateIf(
						{ id, attempt: rec.attempt, state: "running" },
						{ $set: { ...fp, attempt, lease, ...owner, ...(by ? { by } : {}) }, ...(by ? {} : { $unset: { by: true } }) },
					));
			}
			if (claimed) break;
			if (tries >= 3) throw new ApiError(409, IN_PROGRESS);
		}
		req.$ctx.meta.idempotency = { id, attempt, col: collectionOf(action) } satisfies IdemMeta;
		const run: Run = { store, id, attempt, kept: false };
		this.hold(run);
		return { run };
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
		const store = await this.requestStore();
		const pre = fingerprint(req, "streamed");
		return { store, pre, ...(await this.claim(req, store, sha(`${who}\n${key}`), action, { fp: pre, pre }, (rec) => rec.pre === pre)) };
	}

	/** The completed fingerprint of a streamed request: method, path, query and its parsed `parts`. */
	streamedFingerprint(req: Req, parts: unknown[]): string {
		return fingerprint(req, { streamed: parts });
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
		if (status >= 500) return this.giveUp(run, extra);
		await this.release(run);
		if (!fp && !ids.length && (await run.store.removeMany({ id: run.id, attempt: run.attempt, state: "running" }))) return;
		await this.keep(run, status, data, {}, extra);
	}

	/**
	 * A repeat of a streamed request (`claim.rec`): its kept answer when `fp`, its completed fingerprint, is the
	 * record's (or the record's is only provisional: its first request was answered before its body was read), else 422.
	 */
	async replayStreamed(req: Req, res: ServerResponse, claim: StreamedClaim, fp: string | undefined): Promise<void> {
		const rec = claim.rec!;
		if (rec.fp !== claim.pre && rec.fp !== fp) throw new ApiError(422, KEY_REUSED);
		await this.replay(req, res, claim.store, rec, claim.fields ?? null);
	}

	/** The claimed streamed request is over, however it ended: its lease is no longer renewed. */
	static settled(claim: StreamedClaim): void {
		clearInterval(claim.run?.timer);
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
		await this.keep(run, status, data, headers, meta[SHOWN_ONCE] === true ? { once: true } : {});
	}

	private async keep(run: Run, status: number, data: unknown, headers: Record<string, string>, extra: Record<string, unknown> = {}): Promise<void> {
		run.kept = true;
		await this.release(run);
		const text = JSON.stringify(data ?? null);
		const body = Buffer.byteLength(text) <= MAX_KEPT_BODY ? { body: this.seal.encrypt(text) } : { digest: sha(text) };
		// Under this attempt only: a run fenced out by a retry (its write refused with 409) keeps nothing.
		await run.store.updateIf({ id: run.id, attempt: run.attempt }, { $set: { ...extra, state: "done", status, ...body, headers: JSON.stringify(headers), lease: 0 } });
	}

	/**
	 * The kept answer again, to a caller whose decision admitted the request (`fields`). Rebuilt by re-reading when
	 * only its digest was kept or its node died before keeping it, and, for this caller only, when it holds a value
	 * shown once and the caller is not the session that made the request, or shows a field `fields` does not allow.
	 */
	private async replay(req: Req, res: ServerResponse, store: DocumentStore, rec: IdemRecord, fields: Fields): Promise<true> {
		// A body that does not open (kept under another key) is rebuilt like a digest.
		const text = rec.body === undefined ? undefined : (this.seal.decrypt(rec.body) ?? undefined);
		const kept: unknown = text === undefined ? undefined : JSON.parse(text);
		const mine = rec.by !== undefined && rec.by === sessionMark(req.$ctx.meta.token);
		let body = kept !== undefined && (mine || rec.once !== true) && showsOnly(rec.action, kept, fields) ? kept : undefined;
		const status = rec.status ?? 200;
		if (body === undefined) {
			body = await this.reread(req, rec);
			// A committed record whose answer was lost: kept now, so the next repeat does not read again.
			if (text === undefined && rec.state === "committed")
				await store.updateIf(
					{ id: rec.id, attempt: rec.attempt, state: "committed" },
					{ $set: { state: "done", status, body: this.seal.encrypt(JSON.stringify(body)), headers: "{}" } },
				);
		}
		const out = body === kept ? text! : JSON.stringify(body);
		const headers = JSON.parse(rec.headers ?? "{}") as Record<string, string>;
		req.$replayed = true;
		res.writeHead(status, { ...headers, "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(out), [REPLAYED_HEADER]: "true" });
		// A streamed upload's repeat may be answered before its body is read (services/api/early-answer.ts).
		endAnswer(res, out);
		this.opts.onAnswer(req, status, body);
		return true;
	}

	/**
	 * The request's authority decision for its caller now, taken by the routed action itself without running it
	 * (authority/authority.ts, `DECIDE_ONLY`): its 401 or 403 as the request's. A token-only route (no scope) is
	 * decided by the authentication that admitted the request.
	 */
	private async decide(req: Req, action: string): Promise<Fields> {
		if (!isGuarded(action)) return null;
		const meta = req.$ctx.meta;
		let d: Decided | undefined;
		try {
			d = (await req.$ctx.call(action, req.$params ?? {}, { meta: { [DECIDE_ONLY]: true } })) as Decided | undefined;
		} finally {
			// The call's meta comes back merged into the request's: from a remote node it still holds the flag, which
			// would turn the request's next call (a re-read) into a decision too.
			delete meta[DECIDE_ONLY];
		}
		// Anything else means the action ran without its authority layer: never answered from the key.
		if (d?.decided !== true) throw new ApiError(502, "authorization layers were not applied");
		return d.fields;
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
			const found = (await ctx.call(`${base}.list`, { query: { query: JSON.stringify({ id: { $in: ids } }), pagination: JSON.stringify({ limit: ids.length || 1 }) } })) as {
				items: unknown[];
			};
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
