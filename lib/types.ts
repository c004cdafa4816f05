/** Types at the platform's edges: token claims, the request context carried in ctx.meta, documents. */

export type TokenType = "access" | "refresh";

/** Claims of a verified JWT or APT (GET /auth/verify `data`). */
export interface TokenClaims {
	type: TokenType;
	strict: boolean;
	cid: string;
	aid?: string;
	uid?: string;
	scope: string; // space-separated
	domain: string;
	subject: string; // space-separated
	tz?: string;
	lang?: string;
	session: string;
	client_id: string;
	coworker?: string; // space-separated
	/** User group memberships (emails / FQDNs) used by the `group` zone. */
	groups?: string[];
	iat?: number;
	exp?: number;
	[claim: string]: unknown;
}

/** What the gateway puts in ctx.meta for every authenticated call. */
export interface RequestMeta {
	token?: TokenClaims;
	/** `jwt` or `apt`: how the caller authenticated. */
	tokenKind?: "jwt" | "apt";
	ip?: string;
	/** Lower-cased request headers the domain layers read (x-zone, x-exclude-soft-delete-query, ...). */
	headers?: Record<string, string | undefined>;
	[key: string]: unknown;
}

/**
 * Whether a call serves a client's request: the gateway gives each call it makes for one the caller's address (`ip`),
 * and the calls that action makes in turn carry it on; the platform's own calls (workers, timers, /status) have none.
 */
export function servesRequest(meta: Pick<RequestMeta, "ip"> | undefined): boolean {
	return typeof meta?.ip === "string";
}

export type Doc = Record<string, unknown> & { id: string };

/** The identity of a token: uid, else aid, else cid. */
/**
 * Whom a limit, a key or a session belongs to: the token's user, else its API account, else its client (`u:<id>`,
 * `a:<id>`, `c:<id>`); undefined without a token.
 */
export function principalOf(token: { uid?: string; aid?: string; cid?: string } | undefined): string | undefined {
	if (!token) return undefined;
	return token.uid ? `u:${token.uid}` : token.aid ? `a:${token.aid}` : token.cid ? `c:${token.cid}` : undefined;
}

export function identityOf(t: Pick<TokenClaims, "uid" | "aid" | "cid">): string {
	return (t.uid || t.aid || t.cid) as string;
}
