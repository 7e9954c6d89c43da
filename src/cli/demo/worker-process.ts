import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { sleep } from '../../core/index.js';
import { parseEvent, type WorkerCommand, type WorkerConfig, type WorkerEvent } from './protocol.js';

/** One worker process of the demo, as the parent sees it: its commands in, its last stderr lines, its exit. */
export class WorkerProcess {
  readonly stderr: string[] = [];
  stopped = false;
  exited = false;
  readonly exit: Promise<void>;

  constructor(
    readonly name: string,
    readonly child: ChildProcess,
  ) {
    this.exit = new Promise((resolve) => child.once('exit', () => resolve()));
    child.once('exit', () => {
      this.exited = true;
    });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr.push(...chunk.trimEnd().split('\n'));
      if (this.stderr.length > 20) this.stderr.splice(0, this.stderr.length - 20);
    });
    child.stdin!.on('error', () => {}); // a worker that died: its exit is reported instead
  }

  send(command: WorkerCommand): void {
    if (!this.exited && this.child.stdin!.writable) this.child.stdin!.write(`${command}\n`);
  }
}

/** Starts worker.js with `config`; every event it reports goes to `onEvent`. */
export function startWorker(config: WorkerConfig, onEvent: (worker: WorkerProcess, event: WorkerEvent) => void): WorkerProcess {
  const script = fileURLToPath(new URL('./worker.js', import.meta.url));
  const child = spawn(process.execPath, [script, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] });
  const worker = new WorkerProcess(config.name, child);
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const event = parseEvent(line);
    if (event) onEvent(worker, event);
  });
  return worker;
}

/** The process state letter from /proc (Linux): 'T' when stopped. Polls briefly: SIGSTOP is asynchronous. */
export async function procState(pid: number): Promise<string | undefined> {
  for (let i = 0; i < 20; i++) {
    try {
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
      if (state === 'T' || i === 19) return state;
    } catch {
      return undefined;
    }
    await sleep(5);
  }
  return undefined;
}
