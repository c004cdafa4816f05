/** Headless Chromium for the browser suites (playwright-core driving Debian's chromium; .ci/run installs it). */
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

/** Whether Chromium is there; without it the suite skips with a message, or fails the file under REQUIRE_SERVERS=1. */
export function chromiumAvailable(suite: string): boolean {
	if (existsSync(CHROMIUM)) return true;
	if (process.env.REQUIRE_SERVERS === "1") throw new Error(`REQUIRE_SERVERS=1 but no Chromium at ${CHROMIUM} (set CHROMIUM_PATH or install chromium)`);
	console.warn(`${suite} e2e skipped: no Chromium at ${CHROMIUM} (set CHROMIUM_PATH, or REQUIRE_SERVERS=1 to make this a failure)`);
	return false;
}

/** A headless browser that reaches nothing on its own (no background networking, updates or sync). */
export function launchChromium(): Promise<Browser> {
	return chromium.launch({
		executablePath: CHROMIUM,
		args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
	});
}
