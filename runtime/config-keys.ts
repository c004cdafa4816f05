/** The platform's secrets: JWT_SECRET and AES_SECRET, from the environment or DATA_DIR/keys.json. runtime/config.ts re-exports them. */
import { randomBytes } from "crypto";
import path from "path";
import type { PlatformConfig } from "./config";
import { readJson, writePrivateJson } from "./config-files";
import { env } from "./config-env";

export interface Keys {
	jwtSecret: string;
	aesSecret: string;
}

/**
 * JWT_SECRET and AES_SECRET: from the environment, else generated once and kept in DATA_DIR/keys.json (0600) so
 * that restarts keep tokens and encrypted values valid. Nodes of one deployment must share them (set the env).
 */
export function loadKeys(cfg: PlatformConfig): Keys {
	const file = path.join(cfg.dataDir, "keys.json");
	const stored = readJson<Partial<Keys>>(file) ?? {};
	const keys: Keys = {
		jwtSecret: env("JWT_SECRET") ?? stored.jwtSecret ?? randomBytes(32).toString("base64url"),
		aesSecret: env("AES_SECRET") ?? stored.aesSecret ?? randomBytes(32).toString("base64url"),
	};
	if ((stored.jwtSecret !== keys.jwtSecret && !env("JWT_SECRET")) || (stored.aesSecret !== keys.aesSecret && !env("AES_SECRET")))
		writePrivateJson(file, { jwtSecret: env("JWT_SECRET") ? stored.jwtSecret : keys.jwtSecret, aesSecret: env("AES_SECRET") ? stored.aesSecret : keys.aesSecret });
	return keys;
}
