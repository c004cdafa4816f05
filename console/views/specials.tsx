/**
 * A collection's special actions (catalog `specials`, as the OpenAPI document lists them): each a form sending its
 * route with a JSON body (POST) or query parameters (GET), showing the answer. A file upload is a multipart form; a
 * file's download is fetched with the bearer and handed to the browser as a file.
 */
import { useState } from "preact/hooks";
import { api, withQuery } from "../api";
import type { CollectionInfo, SpecialInfo } from "../catalog";
import { ErrorBox, Field, Json, parseJson, useAction } from "../ui";

/** Actions that only read (GET search, vapid) take query parameters; the others a body. */
function SpecialForm({ col, s, id, etag, onDone }: { col: CollectionInfo; s: SpecialInfo; id?: string; etag?: string | null; onDone?: () => void }) {
	const path = `/${col.service}/${col.name}/${s.path.replace(":id", id ?? "")}`;
	const [text, setText] = useState(s.method === "GET" ? "" : "{}");
	const [answer, setAnswer] = useState<unknown>(undefined);
	const [busy, error, run] = useAction();
	const label = `${s.method} ${s.path.replace(":id/", "")}`;
	return (
		<form
			class="special"
			aria-label={label}
			onSubmit={(e) => {
				e.preventDefault();
				void run(async () => {
					const given = parseJson(text, "the parameters") as Record<string, unknown> | undefined;
					const headers: Record<string, string> = etag ? { "if-match": etag } : {};
					const r = s.method === "GET" ? await api("GET", path, { query: given, headers }) : await api(s.method, path, { body: given ?? {}, headers });
					setAnswer(r.data);
					onDone?.();
				});
			}}
		>
			<h3>{label}</h3>
			<p class="muted">{s.summary}</p>
			{(s.method !== "GET" || !s.byId) && <Field label={`${s.method === "GET" ? "Query parameters" : "Body"} of ${label} (JSON)`} value={text} onInput={setText} multiline={3} />}
			<ErrorBox error={error} />
			<button type="submit" disabled={busy}>
				Run {label}
			</button>
			{answer !== undefined && <Json value={answer} />}
		</form>
	);
}

function Upload({ col }: { col: CollectionInfo }) {
	const [files, setFiles] = useState<FileList | null>(null);
	const [name, setName] = useState("");
	const [answer, setAnswer] = useState<unknown>(undefined);
	const [busy, error, run] = useAction();
	return (
		<form
			class="special"
			aria-label="Upload files"
			onSubmit={(e) => {
				e.preventDefault();
				void run(async () => {
					if (!files?.length) throw new Error("choose a file to upload");
					const form = new FormData();
					for (const f of Array.from(files)) {
						if (name.trim() && files.length === 1) form.append("name", name.trim());
						form.append("file", f, f.name);
					}
					setAnswer((await api("POST", `/${col.service}/${col.name}/upload`, { raw: form })).data);
				});
			}}
		>
			<h3>Upload</h3>
			<div class="field">
				<label for="upload-files">Files</label>
				<input id="upload-files" type="file" multiple onChange={(e) => setFiles((e.currentTarget as HTMLInputElement).files)} />
			</div>
			<Field label="Name (one file; default its file name)" value={name} onInput={setName} />
			<ErrorBox error={error} />
			<button type="submit" disabled={busy}>
				Upload
			</button>
			{answer !== undefined && <Json value={answer} />}
		</form>
	);
}

/** The collection-wide actions (not addressed by id), shown under the table. */
export function Specials({ col }: { col: CollectionInfo }) {
	const list = col.specials.filter((s) => !s.byId);
	if (!list.length) return null;
	return (
		<section class="panel" aria-labelledby="specials-title">
			<h2 id="specials-title">Actions</h2>
			{list.map((s) => (s.path === "upload" ? <Upload key={s.path} col={col} /> : <SpecialForm key={s.method + s.path} col={col} s={s} />))}
		</section>
	);
}

/** A file's content through the download route, with the bearer (the browser saves it under the file's name). */
async function download(col: CollectionInfo, id: string, name: string): Promise<void> {
	const r = await api<Blob>("GET", `/${col.service}/${col.name}/${id}/download`, { blob: true });
	const url = URL.createObjectURL(r.data);
	const a = document.createElement("a");
	a.href = url;
	a.download = name || id;
	document.body.append(a);
	a.click();
	a.remove();
	setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** The actions of one document (abort, commit, verify, payment, share, download), shown on its page. */
export function DocumentSpecials({ col, id, etag, doc, onDone }: { col: CollectionInfo; id: string; etag: string | null; doc: Record<string, unknown>; onDone: () => void }) {
	const list = col.specials.filter((s) => s.byId);
	const [busy, error, run] = useAction();
	if (!list.length) return null;
	return (
		<section class="panel" aria-labelledby="doc-specials-title">
			<h2 id="doc-specials-title">Actions</h2>
			{list.map((s) =>
				s.path === ":id/download" ? (
					<div class="special" key={s.path}>
						<h3>Download</h3>
						<ErrorBox error={error} />
						<button type="button" disabled={busy} onClick={() => void run(() => download(col, id, String(doc.name ?? "")))}>
							Download
						</button>
						<p class="muted">
							Or share it: <code>{withQuery(`/${col.service}/${col.name}/${id}/download`, { key: "<share key>" })}</code> works without a token.
						</p>
					</div>
				) : (
					<SpecialForm key={s.method + s.path} col={col} s={s} id={id} etag={etag} onDone={onDone} />
				),
			)}
		</section>
	);
}
