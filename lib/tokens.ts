/**
 * JWT issuing and verification: HS256 only, with the key as a KeyObject (a plain string secret makes
 * jsonwebtoken try to parse it as a PEM key first, ~100x slower).
 */
import { createSecretKey, type KeyObject } from "crypto";
import jwt from "jsonwebtoken";
import type { TokenClaims } from "./types";

export const ACCESS_TTL = 900;
export const REFRESH_TTL = 86_400;
export const APT_DEFAULT_TTL_MS = 90 * 24 * 3600 * 1000;
/** How far in the future a token's `iat`/`nbf` may lie (TOKEN_LEEWAY_SECONDS): the clocks of two nodes differ a little. */
export const DEFAULT_LEEWAY_SEC = 60;

/** A refusal says whether the token is only too early (`notYetValid`) or only too late (`expired`: its signature holds). */
export type TokenCheck = { claims: TokenClaims & { jti?: string } } | { claims?: undefined; notYetValid: boolean; expired?: boolean };

export class JwtKeys {
	private readonly key: KeyObject;
	constructor(secret: string) {
		this.key = createSecretKey(Buffer.from(secret, "utf8"));
	}

	sign(claims: Omit<TokenClaims, "iat" | "exp">, ttlSeconds: number, jti?: string): string {
		return jwt.sign(claims as object, this.key, { algorithm: "HS256", expiresIn: ttlSeconds, ...(jti ? { jwtid: jti } : {}) });
	}

	/** Claims of a valid token, or null (bad signature, other algorithm, `none`, malformed, expired, not yet valid). */
	verify(token: string, leewaySec = DEFAULT_LEEWAY_SEC): (TokenClaims & { jti?: string }) | null {
		return this.check(token, leewaySec).claims ?? null;
	}

	/**
	 * The claims of a valid token, else whether it is only refused for being not yet valid: its `iat` or `nbf` more
	 * than `leewaySec` ahead of this node's clock (the issuer's clock runs ahead, or this one's behind). `exp` has no
	 * leeway.
	 */
	check(token: string, leewaySec = DEFAULT_LEEWAY_SEC): TokenCheck {
		let c: unknown;
		try {
			c = jwt.verify(token, this.key, { algorithms: ["HS256"], ignoreNotBefore: true });
		} catch (err) {
			// jsonwebtoken checks the signature before `exp`: TokenExpiredError is a token of ours past its time.
			return { notYetValid: false, expired: (err as { name?: unknown })?.name === "TokenExpiredError" };
		}
		if (typeof c !== "object" || c === null) return { notYetValid: false };
		const claims = c as TokenClaims & { jti?: string; nbf?: unknown };
		const latest = Date.now() / 1000 + leewaySec;
		if ([claims.iat, claims.nbf].some((t) => typeof t === "number" && t > latest)) return { notYetValid: true };
		return { claims };
	}
}

/** The claims of the spec's table (GET /auth/verify) plus `iat` and `exp` (docs/contracts.md "Tokens and sessions"). */
const PUBLIC_CLAIMS = ["type", "strict", "cid", "aid", "uid", "scope", "domain", "subject", "tz", "lang", "session", "client_id", "coworker", "iat", "exp"] as const;

/** Claims as GET /auth/verify shows them (spec table plus iat/exp), whatever extra the token carries (jti, groups, ...). */
export function publicClaims(c: TokenClaims): TokenClaims {
	const out: Record<string, unknown> = {};
	for (const k of PUBLIC_CLAIMS) if (c[k] !== undefined) out[k] = c[k];
	return out as TokenClaims;
}
