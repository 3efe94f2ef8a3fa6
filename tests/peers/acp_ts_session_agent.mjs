// An ACP agent written with the official TypeScript SDK
// (@agentclientprotocol/sdk) that keeps its sessions on disk, so a later process
// can load them: session/load replays each stored exchange (the user's prompt, a
// tool call, the reply) before it answers. --resume-only advertises
// sessionCapabilities.resume instead of loadSession (a resume replays nothing).
// Env: ACP_SESSIONS, the directory holding one JSON file per session;
// ACP_SDK_PATH, the SDK's entry module (found by the test). A prompt is answered
// with "reply to: TEXT (turn N)"; an unknown session id is refused with -32002.
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const acp = await import(pathToFileURL(process.env.ACP_SDK_PATH).href);
const STORE = process.env.ACP_SESSIONS;
const RESUME_ONLY = process.argv.includes("--resume-only");

const file = (id) => join(STORE, `${id}.json`);

function history(id) {
  if (!existsSync(file(id))) {
    throw acp.RequestError.resourceNotFound(id);
  }
  return JSON.parse(readFileSync(file(id), "utf8"));
}

class SessionAgent {
  constructor(connection) {
    this.connection = connection;
  }

  async initialize() {
    const agentCapabilities = RESUME_ONLY
      ? { sessionCapabilities: { resume: {} } }
      : { loadSession: true };
    return { protocolVersion: acp.PROTOCOL_VERSION, agentCapabilities };
  }

  async newSession() {
    const sessionId = `ts-${randomUUID().slice(0, 12)}`;
    writeFileSync(file(sessionId), "[]");
    return { sessionId };
  }

  async authenticate() {
    return {};
  }

  async loadSession(params) {
    const { sessionId } = params;
    const send = (update) => this.connection.sessionUpdate({ sessionId, update });
    for (const [n, [question, answer]] of history(sessionId).entries()) {
      await send({
        sessionUpdate: "user_message_chunk",
        content: { type: "text", text: question },
      });
      await send({
        sessionUpdate: "tool_call",
        toolCallId: `old-${n}`,
        title: "Look it up",
        kind: "search",
        status: "pending",
      });
      await send({
        sessionUpdate: "tool_call_update",
        toolCallId: `old-${n}`,
        status: "completed",
      });
      await send({
        sessionUpdate: "agent_message_chunk",
        content: { type: "text", text: answer },
      });
    }
    return {};
  }

  async unstable_resumeSession(params) {
    history(params.sessionId); // known, or -32002
    return {};
  }

  async prompt(params) {
    const { sessionId } = params;
    const turns = history(sessionId);
    const text = params.prompt.map((block) => block.text ?? "").join("");
    const answer = `reply to: ${text} (turn ${turns.length + 1})`;
    await this.connection.sessionUpdate({
      sessionId,
      update: {
        sessionUpdate: "agent_message_chunk",
        content: { type: "text", text: answer },
      },
    });
    turns.push([text, answer]);
    writeFileSync(file(sessionId), JSON.stringify(turns));
    return { stopReason: "end_turn" };
  }

  async cancel() {}
}

const stream = acp.ndJsonStream(
  Writable.toWeb(process.stdout),
  Readable.toWeb(process.stdin),
);
new acp.AgentSideConnection((conn) => new SessionAgent(conn), stream);
