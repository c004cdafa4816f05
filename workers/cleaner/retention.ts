/** Retention rules of the cleaner: how long soft-deleted documents, delivery records and audit entries are kept. */
import type { PlatformConfig } from "../../runtime/config";

export const DAY_MS = 24 * 3600 * 1000;

/** `identity/sessions` → `IDENTITY_SESSIONS`, the middle of its RETENTION_<SERVICE>_<COLLECTION>_DAYS setting. */
export function retentionKey(service: string, collection: string): string {
	return `${service}_${collection}`.toUpperCase().replace(/[^A-Z0-9]/g, "_");
}

/** Days a soft-deleted document of this collection is kept: its override, else RETENTION_DAYS. */
export function retentionDays(cfg: Pick<PlatformConfig, "retentionDays" | "retentionOverrides">, service: string, collection: string): number {
	return cfg.retentionOverrides?.[retentionKey(service, collection)] ?? cfg.retentionDays;
}

/** ISO time before which records are expired, `days` before `now`. */
export function cutoff(days: number, now = Date.now()): string {
	return new Date(now - days * DAY_MS).toISOString();
}
