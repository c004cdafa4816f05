/**
 * The failed-login bounds (docs/security.md, "Failed logins"), counted in the shared cache under `auth:fail:` (kept
 * across restarts of the embedded cache: runtime/kv PERSISTED_PREFIXES). Every counter belongs to one tenant, the
 * client the request names, so failures through one client never block logins through another:
 * - per account: what an attempt guesses (a user's password, the client's secret, its authorization codes), per
 *   client and caller IP: LOGIN_ACCOUNT_LIMIT within the window;
 * - per client and IP, across its accounts: LOGIN_IP_LIMIT within the window.
 * Requests naming no existing client count under the tenant `unknown`. The operators' listing and lifting of blocks
 * (GET and DELETE /auth/login-blocks, the console's `login-blocks`) read the same counters.
 */
import { createHmac, hkdfSync } from "crypto";
import type { KeyValue } from "../../runtime/kv";
import { FailureCounter, type FailureLimit } from "./failure-limits";

export const LOGIN_ACCOUNT_LIMIT = 10;
export const LOGIN_IP_LIMIT = 100;
export const LOGIN_WINDOW_MS = 15 * 60 * 1000;
export const ACCOUNT_LIMITED = "too many failed login attempts for this account from this IP";
export const IP_LIMITED = "too many failed login attempts from this IP";
/** The tenant of failures through a client_id that names no live client. */
export const UNKNOWN_TENANT = "unknown";
/** The most blocks one listing answers (the newest first); `total` counts them all. */
export const BLOCKS_LISTED = 1000;

const PREFIX = "auth:fail:";
const ACCOUNT_ID = /^acct:([0-9a-f]{24}|unknown):(user\.[0-9a-f]{24}|login\.[0-9a-f]{16}|secret|code):([^\s/]{0,100})$/;
const IP_ID = /^ip:([0-9a-f]{24}|unknown):([^\s/]{0,100})$/;

/**
 * What a failed attempt guessed: a user's password (the user it names, by id, or, naming none, the login's keyed
 * digest: the cache never holds what was typed, which may be a password), the client's secret, or its codes.
 */
export type Account = `user.${string}` | `login.${string}` | "secret" | "code";

/** A counter that reached its limit, as the operators' listing shows it. */
export interface LoginBlock {
	/** The block's id in DELETE /auth/login-blocks/{id} and `login-unblock <id>`. */
	id: string;
	/** `account`: one account's failures from `ip`; `ip`: every failure through the client from `ip`. */
	counter: "account" | "ip";
	/** The client (tenant) the failures went through; null for client_ids that name no client. */
	client: string | null;
	account?: "user" | "login" | "secret" | "code";
	/** The user whose password was guessed (account `user`). */
	user?: string;
	ip: string;
	failures: number;
	limit: number;
	/** When the block ends by itself (ISO 8601). */
	until: string;
}

export interface BlockFilter {
	client?: string;
	user?: string;
	ip?: string;
}

/** The tenant, account and IP of a block id; null when it is none. */
export function parseBlockId(id: string): { tenant: string; account?: string; ip: string } | null {
	const a = ACCOUNT_ID.exec(id);
	if (a) return { tenant: a[1], account: a[2], ip: a[3] };
	const i = IP_ID.exec(id);
	return i ? { tenant: i[1], ip: i[2] } : null;
}

function blockOf(id: string, count: number, until: number): LoginBlock | null {
	const p = parseBlockId(id);
	if (!p) return null;
	const [kind, user] = p.account?.split(".") ?? [];
	return {
		id,
		counter: p.account ? "account" : "ip",
		client: p.tenant === UNKNOWN_TENANT ? null : p.tenant,
		...(kind ? { account: kind as LoginBlock["account"] } : {}),
		...(kind === "user" ? { user } : {}),
		ip: p.ip,
		failures: count,
		limit: p.account ? LOGIN_ACCOUNT_LIMIT : LOGIN_IP_LIMIT,
		until: new Date(until).toISOString(),
	};
}

export class LoginLimits {
	readonly counter: FailureCounter;
	private readonly digestKey: Buffer;

	/** `secret`: the platform's AES_SECRET, from which the key of login digests is derived (its own purpose). */
	constructor(kv: KeyValue, secret: string) {
		this.counter = new FailureCounter(kv, LOGIN_WINDOW_MS);
		this.digestKey = Buffer.from(hkdfSync("sha256", Buffer.from(secret, "utf8"), Buffer.alloc(0), Buffer.from("platform/login-failures", "utf8"), 32));
	}

	/** The account of a login that names no user: a keyed digest, the same for the same login (trimmed, any case). */
	unknownLogin(login: string): Account {
		return `login.${createHmac("sha256", this.digestKey).update(login.trim().toLowerCase()).digest("hex").slice(0, 16)}`;
	}

	/** The counters of a request through `tenant` from `ip`: one per account it guesses, then the tenant's IP-wide one. */
	limits(tenant: string, accounts: Account[], ip: string): FailureLimit[] {
		return [
			...accounts.map((a) => ({ key: `${PREFIX}acct:${tenant}:${a}:${ip}`, limit: LOGIN_ACCOUNT_LIMIT, message: ACCOUNT_LIMITED })),
			{ key: `${PREFIX}ip:${tenant}:${ip}`, limit: LOGIN_IP_LIMIT, message: IP_LIMITED },
		];
	}

	/** The blocks in force, newest first: of `tenant` only when given (a tenant admin), else every one (the operator). */
	async list(tenant: string | undefined, filter: BlockFilter = {}): Promise<{ items: LoginBlock[]; total: number }> {
		const blocks = (await this.counter.blocked(PREFIX))
			.map((b) => blockOf(b.key.slice(PREFIX.length), b.count, b.until))
			.filter((b): b is LoginBlock => b !== null && (tenant === undefined || b.client === tenant))
			.filter(
				(b) =>
					(filter.client === undefined || b.client === filter.client) && (filter.user === undefined || b.user === filter.user) && (filter.ip === undefined || b.ip === filter.ip),
			)
			.sort((x, y) => y.until.localeCompare(x.until));
		return { items: blocks.slice(0, BLOCKS_LISTED), total: blocks.length };
	}

	/** Lifts the block `id` (of `tenant` only, when given): its counter starts again from nothing. False when none. */
	async lift(id: string, tenant?: string): Promise<boolean> {
		const p = parseBlockId(id);
		if (!p || (tenant !== undefined && p.tenant !== tenant)) return false;
		return this.counter.lift(`${PREFIX}${id}`);
	}
}
