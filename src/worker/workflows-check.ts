import path from 'node:path';
import { Worker, type WorkerOptions, type WorkflowBundleOption } from '@temporalio/worker';
import { InvalidActionError } from '../core/errors.js';

const RECONCILE_WORKFLOW = 'ReconcileWorkflow';
const PLUGIN = 'sideeffect-workflows-check';

type BundlerOptions = NonNullable<WorkerOptions['bundlerOptions']>;

/**
 * The error for a Worker whose workflows lack ReconcileWorkflow. Raised before the Worker
 * polls: otherwise nothing fails until the first uncertain key, whose ReconcileWorkflow then
 * fails its task in a loop ("no such function is exported by the workflow bundle").
 */
export function missingReconcileWorkflow(where: string): InvalidActionError {
  return new InvalidActionError(
    'workflows',
    `${where} does not export ${RECONCILE_WORKFLOW}, which runs on this task queue for every uncertain key: add \`export { ReconcileWorkflow } from 'sideeffect/workflows';\` to your workflows module`,
  );
}

/**
 * `bundlerOptions` (the host's own webpack hook kept) whose webpack run fails, before the Worker
 * exists, when the module at `workflowsPath` does not export ReconcileWorkflow. A module whose
 * exports webpack cannot know (CommonJS) passes.
 */
export function requireReconcileExport(
  bundlerOptions: BundlerOptions | undefined,
  workflowsPath: string,
): BundlerOptions {
  const hook = bundlerOptions?.webpackConfigHook;
  return {
    ...bundlerOptions,
    webpackConfigHook(given) {
      const config = hook ? hook(given) : given;
      const plugin: NonNullable<typeof config.plugins>[number] = {
        apply(compiler) {
          compiler.hooks.compilation.tap(PLUGIN, (compilation) => {
            // After webpack's own tap, which computes what each module exports.
            compilation.hooks.finishModules.tap({ name: PLUGIN, stage: 1000 }, (modules) => {
              for (const module of modules) {
                const resource = (module as { resource?: string }).resource;
                if (!resource || !isWorkflowsModule(resource, workflowsPath)) continue;
                const names = compilation.moduleGraph.getExportsInfo(module).getProvidedExports();
                if (Array.isArray(names) && !names.includes(RECONCILE_WORKFLOW))
                  throw missingReconcileWorkflow(workflowsPath);
              }
            });
          });
        },
      };
      return { ...config, plugins: [...(config.plugins ?? []), plugin] };
    },
  };
}

/** The file itself, or a directory's index module (the bundler's entry requires the directory). */
function isWorkflowsModule(resource: string, given: string): boolean {
  const file = resource.split('?')[0]!;
  const workflowsPath = path.resolve(given);
  if (file === workflowsPath) return true;
  return path.dirname(file) === workflowsPath && path.basename(file).startsWith('index.');
}

/**
 * Whether a prebuilt bundle runs ReconcileWorkflow: replays a one-task history that starts one,
 * so the SDK itself looks the function up exactly as a worker's first task would.
 */
export async function bundleRunsReconcile(workflowBundle: WorkflowBundleOption): Promise<boolean> {
  const attributes = {
    workflowType: { name: RECONCILE_WORKFLOW },
    taskQueue: { name: PLUGIN },
    input: {
      payloads: [
        {
          metadata: { encoding: Buffer.from('json/plain').toString('base64') },
          data: Buffer.from(
            JSON.stringify({ key: 'check', resource: 'check', reason: 'check' }),
          ).toString('base64'),
        },
      ],
    },
    workflowTaskTimeout: '10s',
    originalExecutionRunId: '00000000-0000-4000-8000-000000000000',
    firstExecutionRunId: '00000000-0000-4000-8000-000000000000',
    attempt: 1,
  };
  const history = {
    events: [
      {
        eventId: '1',
        eventTime: '2020-01-01T00:00:00Z',
        eventType: 'EVENT_TYPE_WORKFLOW_EXECUTION_STARTED',
        workflowExecutionStartedEventAttributes: attributes,
      },
      {
        eventId: '2',
        eventTime: '2020-01-01T00:00:00Z',
        eventType: 'EVENT_TYPE_WORKFLOW_TASK_SCHEDULED',
        workflowTaskScheduledEventAttributes: { taskQueue: { name: PLUGIN }, attempt: 1 },
      },
      {
        eventId: '3',
        eventTime: '2020-01-01T00:00:00Z',
        eventType: 'EVENT_TYPE_WORKFLOW_TASK_STARTED',
        workflowTaskStartedEventAttributes: { scheduledEventId: '2' },
      },
      {
        eventId: '4',
        eventTime: '2020-01-01T00:00:00Z',
        eventType: 'EVENT_TYPE_WORKFLOW_TASK_COMPLETED',
        workflowTaskCompletedEventAttributes: { scheduledEventId: '2', startedEventId: '3' },
      },
    ],
  };
  try {
    await Worker.runReplayHistory({ workflowBundle }, history, `${PLUGIN}/check`);
    return true;
  } catch (error) {
    return !/no such function is exported/.test(String((error as Error)?.message ?? error));
  }
}
