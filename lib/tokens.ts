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

export class JwtKeys {
	private readonly key: KeyObject;
	constructor(secret: string) {
		this.key = createSecretKey(Buffer.from(secret, "utf8"));
	}

	sign(claims: Omit<TokenClaims, "iat" | "exp">, ttlSeconds: number, jti?: string): string {
		return jwt.sign(claims as object, this.key, { algorithm: "HS256", expiresIn: ttlSeconds, ...(jti ? { jwtid: jti } : {}) });
	}

	/** Claims of a valid token, or null (bad signature, other algorithm, `none`, malformed, expired). */
	verify(token: string): (TokenClaims & { jti?: string }) | null {
		try {
			const c = jwt.verify(token, this.key, { algorithms: ["HS256"] });
			return typeof c === "object" && c !== null ? (c as TokenClaims) : null;
		} catch {
			return null;
		}
	}
}

/** The claims of the spec's table (GET /auth/verify) plus `iat` and `exp` (CONTRACTS.md). */
const PUBLIC_CLAIMS = ["type", "strict", "cid", "aid", "uid", "scope", "domain", "subject", "tz", "lang", "session", "client_id", "coworker", "iat", "exp"] as const;

/** Claims as GET /auth/verify shows them (spec table plus iat/exp), whatever extra the token carries (jti, groups, ...). */
export function publicClaims(c: TokenClaims): TokenClaims {
	const out: Record<string, unknown> = {};
	for (const k of PUBLIC_CLAIMS) if (c[k] !== undefined) out[k] = c[k];
	return out as TokenClaims;
}
