/**
 * VAPID keys of Web Push (RFC 8292): VAPID_PUBLIC_KEY / VAPID_PRIVATE_KEY (base64url, P-256), else generated once and
 * kept in DATA_DIR/vapid.json (mode 0600) so subscriptions made against the public key stay valid across restarts.
 * Several nodes of one deployment must share them: set the environment. The private key is never logged or returned.
 */
import path from "path";
import { readJson, writePrivateJson, type PlatformConfig } from "./config";

export interface VapidKeys {
	publicKey: string;
	privateKey: string;
	subject: string;
}

const cache = new Map<string, VapidKeys>();

export function loadVapid(cfg: Pick<PlatformConfig, "dataDir" | "rootDomain" | "vapidPublicKey" | "vapidPrivateKey" | "vapidSubject">): VapidKeys {
	const subject = cfg.vapidSubject ?? `mailto:operator@${cfg.rootDomain}`;
	if (cfg.vapidPublicKey && cfg.vapidPrivateKey) return { publicKey: cfg.vapidPublicKey, privateKey: cfg.vapidPrivateKey, subject };
	if (cfg.vapidPublicKey || cfg.vapidPrivateKey) throw new Error("VAPID_PUBLIC_KEY and VAPID_PRIVATE_KEY must be set together");
	const file = path.join(cfg.dataDir, "vapid.json");
	const hit = cache.get(file);
	if (hit) return { ...hit, subject };
	let keys = readJson<{ publicKey: string; privateKey: string }>(file);
	if (!keys?.publicKey || !keys?.privateKey) {
		// Web Push is loaded here, once per DATA_DIR that has no keys yet, not by every node at start.
		keys = (require("web-push") as typeof import("web-push")).generateVAPIDKeys();
		writePrivateJson(file, keys);
	}
	const out = { publicKey: keys.publicKey, privateKey: keys.privateKey, subject };
	cache.set(file, out);
	return out;
}
