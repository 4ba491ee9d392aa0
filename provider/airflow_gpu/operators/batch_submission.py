"""The SubmitJob of a ``GPUBatchOperator``: its job definition, its arguments for a placement, the queue check.

``GPUBatchOperator`` translates an accelerator spec and waits; building what AWS Batch is asked to
run is this mixin's (``BatchSubmission``): the job definition registered once per content, the
SubmitJob arguments for the run's placement (the user's rendered arguments, the queue, the
identity tags, the container overrides with the profiler), the submit itself (never twice for the
same name and try: SubmitJob has no idempotency token), and the check that some queue launches
each candidate. A kill (``on_kill``) while SubmitJob is in flight stops the job it creates
(``batch_submit.Withdrawn``). The same ``submission_arguments`` build the plan a deferred task
hands its trigger (``batch_deferral.resubmission_plan``), so the triggerer submits exactly what
the worker would.
A multi-node job (``accelerate_batch``) overrides ``_job_definition``, ``_submission_overrides``
and ``_check_queue_offers``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from airflow.providers.amazon.aws.utils import trim_none_values
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_gpu.accelerators import batch_job
from airflow_gpu.accelerators.batch_queues import check_offers, offered_placement
from airflow_gpu.hooks import batch_submit
from airflow_gpu.hooks.registry import read_entrypoint
from airflow_gpu.images.entrypoint import EXECS_ARGUMENTS, WrapDecision, decide
from airflow_gpu.operators import orphaned_try
from airflow_gpu.operators.batch_deferral import JOB_ID_XCOM_KEY, STATE_KEY, first_job_name
from airflow_gpu.operators.gpu_profile import ENV_SPOT_NOTICE, profiler_environment
from airflow_gpu.operators.profiler_forms import recall, remember
from airflow_gpu.operators.spot_task import save_run
from airflow_gpu.profiling import bundle, wrapper_forms
from airflow_gpu.spot import batch as spot_batch
from airflow_gpu.spot.batch import FINAL
from airflow_gpu.spot.policy import Placement
from airflow_gpu.spot.start_failure import names_program
from airflow_gpu.triggers.batch_resubmission import oldest_of_try, same_task_try, submission_name
from airflow_gpu.utils.batch_links import persist_job_links

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_gpu.operators.batch import GPUBatchOperator

#: Where the profiler writes the spot notice it reads from the instance metadata service.
SPOT_NOTICE_FILE = "/tmp/airflow-gpu/spot-notice"


class BatchSubmission:
    """What ``GPUBatchOperator`` submits (a mixin of it, as ``batch_deferral.BatchDeferral`` is)."""

    # --- the submission: built from the rendered arguments and the placement ---------------

    def _queue_for(self, placement: Placement) -> str:
        op = _operator(self)
        return op.queues[placement.capacity or "spot"] if op.queues else str(op.job_queue)

    def _definition(self, context: Context) -> str:
        """The job definition ARN for the current candidate: the user's, or ours registered once."""
        op = _operator(self)
        if op.user_job_definition:
            return str(op.job_definition)  # rendered: job_definition is a template field
        i = op.spot_run.placement.candidate
        if i in op._definitions:
            return op._definitions[i]
        retry = spot_batch.retry_strategy(op.spot)
        profiler = bundle.environment(batch=True) if op.gpu_profile else None  # too big for the overrides
        definition = op._job_definition(
            batch_job.job_definition(op.images[i], op.placements[i], retry, str(op.candidates[i]), profiler)
        )
        name = batch_job.batch_name(context["ti"].dag_id, op.task_id, op.candidates[i].type)
        op._definitions[i] = op.gpu_hook.register_job_definition_once(name, definition)
        return op._definitions[i]

    def _job_definition(self, definition: dict[str, Any]) -> dict[str, Any]:
        """RegisterJobDefinition's arguments as registered (a multi-node job reshapes them)."""
        return definition

    def submit_job(self, context: Context) -> None:
        """SubmitJob for the run's placement; the operator's own fields stay as the user rendered them."""
        op = _operator(self)
        placement = offered_placement(op.spot_run.placement, op.candidates, op.queues, str(op.job_queue), op._offers)
        if placement != op.spot_run.placement:
            op.log.warning("%s is not offered by its queue; using %s", op.accelerator, placement)
            op.spot_run.move_to(placement)
        args = op.submission_arguments(context, placement)
        if adopted := op._submitted_already(args):  # SubmitJob has no idempotency token
            op.log.info("Following job %s (%s), submitted for this try already", adopted, args["jobName"])
            op.job_id = adopted
        elif adopted := op._submitted_by_earlier_try(args):
            op.log.info("Took over job %s (%s), which try %s's trigger submitted, instead of submitting it again",
                        adopted, args["jobName"], op._earlier_try)  # fmt: skip
            op.job_id = adopted
        else:
            op.log.info("Submitting %s on %s to queue %s", args["jobName"], op.accelerator, args["jobQueue"])
            identity = _identity(args)

            # A lost answer is looked up by name and tags before the job is sent again. on_kill meanwhile (the
            # task runner's SIGTERM handler, run in this thread) had no id to terminate: nothing more is sent,
            # and a job created is terminated (batch_submit.Withdrawn).
            # A try whose supervisor died between two sends (a throttle's pause) sends nothing more either: it can
            # save nothing for its retry, which would not know the job and submit another (the twelfth soak). A
            # job its submission created or found meanwhile is left as the orphan leaves any (``orphaned_try``:
            # a retry may take it over), not terminated; and its log lines, which would fail, are dropped.
            try:
                submitted = op.gpu_hook.submit_job_once(
                    args, lambda jobs: oldest_of_try(jobs, identity), stop=lambda: op._killing,
                    log=_QuietOnceOrphaned(op), leave=lambda: orphaned_try.orphaned(op),
                )  # fmt: skip
            except batch_submit.Left as left:
                op.job_id = left.job_id
                raise orphaned_try.OrphanedTry() from left
            except batch_submit.Withdrawn as withdrawn:
                raise AirflowException(str(withdrawn)) from withdrawn
            except Exception as error:
                raise AirflowException(f"AWS Batch refused the job: {error}") from error
            op.job_id = submitted.job_id
            if submitted.resent:  # its first job may yet be listed: see _stop_duplicates
                until = time.monotonic() + batch_submit.DUPLICATE_WATCH
                op._duplicate_watch = (str(args["jobQueue"]), str(args["jobName"]), identity, until)
                op._watched_job = str(submitted.job_id)
        if op._killing:  # on_kill ran before the id was known: it terminated the job before this one
            try:
                batch_submit.withdraw(op.gpu_hook, args, str(op.job_id), op.log)
            except batch_submit.Withdrawn as withdrawn:
                raise AirflowException(str(withdrawn)) from withdrawn
        op.spot_run.submitted(str(op.job_id))
        save_run(context, STATE_KEY, op.spot_run)  # before anything else can fail
        context["ti"].xcom_push(key=JOB_ID_XCOM_KEY, value=op.job_id)
        job = op.gpu_hook.describe_job(str(op.job_id), op.poll_interval)
        persist_job_links(context, op, op.gpu_hook, job)

    #: After a job sent again past the look-up of its lost answer (``batch_submit``): its queue, name and
    #: identity tags, and the monotonic time until which a first job of the try listed late is looked for.
    _duplicate_watch: tuple[str, str, dict[str, str], float] | None = None
    #: The job of the watched name the try follows; once it follows a later submission's, none of the name is.
    _watched_job: str | None = None
    _duplicates_checked = 0.0  # monotonic time of the last look

    def _stop_duplicates(self, context: Context) -> None:
        """While the watch lasts, at most every ``DUPLICATE_CHECK`` s: this try's first-created job of the
        name is followed and any other still running is terminated (``batch_submit.stop_duplicates``)."""
        op = _operator(self)
        watch, now = op._duplicate_watch, time.monotonic()
        if watch is None or now - op._duplicates_checked < batch_submit.DUPLICATE_CHECK:
            return
        queue, name, identity, until = watch
        op._duplicates_checked = now
        if now >= until:
            op._duplicate_watch = None
        # Followed still: the first-created job of the name is the try's. Moved on (the job was interrupted and
        # submitted again under the next name within the watch): the try follows none of the name, and any of
        # them listed late is stopped, never followed in place of the later job (the twenty-fourth soak followed
        # an ended job again, counted its interruption twice more, and left two later jobs running).
        moved_on = op._watched_job is not None and op._watched_job != op.job_id
        keep = (lambda jobs: {"jobId": op.job_id}) if moved_on else (lambda jobs: oldest_of_try(jobs, identity))
        kept = batch_submit.stop_duplicates(
            op.gpu_hook, queue, name, keep, lambda job: same_task_try(job, identity), FINAL,
        )  # fmt: skip
        if kept is not None and kept != op.job_id:
            op.log.warning("Following job %s, created first, instead of %s", kept, op.job_id)
            op.job_id = op._watched_job = kept
            op.spot_run.submitted(kept)
            save_run(context, STATE_KEY, op.spot_run)
            context["ti"].xcom_push(key=JOB_ID_XCOM_KEY, value=kept)

    def _submitted_already(self, args: Mapping[str, Any]) -> str | None:
        """A resubmission's job this task try has already (a trigger's submit that failed on the way
        back, or that botocore retried): found by its name and identity tags, never submitted twice."""
        op = _operator(self)
        if op.spot_run.submissions == 0:
            return None
        kept = oldest_of_try(op.gpu_hook.jobs_named(args["jobQueue"], args["jobName"]), _identity(args))
        return str(kept["jobId"]) if kept else None

    def _submitted_by_earlier_try(self, args: Mapping[str, Any]) -> str | None:
        """In a run taken over from an earlier try (``_earlier_job``), that try's job of the name: its
        trigger went on after a reclaim without the task state store, which still names the job the run
        was deferred on, and the try's resume was lost. Found by name and that try's tags, as above."""
        op = _operator(self)
        if op.spot_run.submissions == 0 or op._earlier_try is None:
            return None
        identity = {**_identity(args), batch_job.TRY_TAG: op._earlier_try}
        kept = oldest_of_try(op.gpu_hook.jobs_named(args["jobQueue"], args["jobName"]), identity)
        return str(kept["jobId"]) if kept else None

    def submission_arguments(self, context: Context, placement: Placement) -> dict[str, Any]:
        """SubmitJob's arguments for ``placement`` (the run's current one: the job definition is its
        candidate's); a deferred task's trigger submits the next jobs from them."""
        op = _operator(self)
        args = {
            **{name: getattr(op, attribute) for name, attribute in batch_job.PASSED_THROUGH.items()},
            "jobName": submission_name(first_job_name(op, context), op.spot_run.submissions),
            "jobQueue": op._queue_for(placement),
            "jobDefinition": op._definition(context),
            "tags": {**(op.tags or {}), **batch_job.identity_tags(context["ti"])},
            "timeout": {"attemptDurationSeconds": op.submit_job_timeout} if op.submit_job_timeout else None,
            **op._submission_overrides(placement),
        }
        return dict(trim_none_values(args))

    def _submission_overrides(self, placement: Placement) -> dict[str, Any]:
        """SubmitJob's overrides: the container's (a multi-node job has its nodes' instead)."""
        op = _operator(self)
        overrides = op._overrides(placement)
        if refusal := batch_job.overrides_too_long(overrides):
            raise AirflowFailException(refusal)
        return {"containerOverrides": overrides}

    def _overrides(self, placement: Placement) -> dict[str, Any]:
        """The container overrides; with ``gpu_profile`` the command runs under the profiler."""
        op = _operator(self)
        overrides, command = dict(op.container_overrides or {}), op.command
        run_environment = op.spot_run.environment()
        given = overrides.get("command") or command
        if op.gpu_profile and not given:
            op.log.warning("gpu_profile needs `command`: the job definition's own cannot be wrapped; not profiling")
        elif op.gpu_profile and op.user_job_definition:
            op.log.warning(
                "gpu_profile needs the job definition this operator registers: the profiler's code travels in "
                "its environment (ECS takes no more than 8,192 characters of overrides); not profiling"
            )
        elif op.gpu_profile and given and (form := op._wrapper_form(placement.candidate)) is not None:
            command = bundle.wrap_short(given) if form == bundle.SHELL else bundle.wrap_python(given)
            overrides.pop("command", None)
            run_environment |= profiler_environment(op.profile_interval, placement.capacity)
            run_environment[ENV_SPOT_NOTICE] = SPOT_NOTICE_FILE
        return batch_job.container_overrides(
            overrides,
            op.environment,
            run_environment,
            op.placements[placement.candidate],
            command,
            on_user_definition=bool(op.user_job_definition),
        )

    @property
    def _wrapped(self) -> bool:
        """Whether this task's jobs (the current candidate's) run under the profiler (see ``_overrides``)."""
        op = _operator(self)
        given = (op.container_overrides or {}).get("command") or op.command
        if not (op.gpu_profile and given and not op.user_job_definition):
            return False
        return op._wrapper_form(op.spot_run.placement.candidate) is not None

    def _wrapper_form(self, candidate: int) -> str | None:
        """How the candidate's image runs the profiler: through ``/bin/sh`` (``bundle.SHELL``), through
        ``python3`` alone (``bundle.PYTHON``: an image without a shell), or not at all (None, and
        ``_profile_notes`` says why). Its ENTRYPOINT decides first (``images.entrypoint``): one that
        would receive the wrapper as its arguments is never given it. Then the form recorded for the image
        (``SpotRun.profiler_forms``: found by this run, carried through deferrals, or by an earlier try of
        the task, from the task state store: ``operators.profiler_forms``)."""
        op = _operator(self)
        if candidate not in op._wrapper_forms:
            image = op.images[candidate]
            if op.image_entrypoint == EXECS_ARGUMENTS:
                decision = WrapDecision(True)
            elif op.image_entrypoint is not None:
                decision = decide(image, list(op.image_entrypoint))
            else:
                entrypoint, unreadable = read_entrypoint(op.gpu_hook, image)
                decision = decide(image, entrypoint, unreadable)
            op._wrapper_forms[candidate] = bundle.SHELL if decision.wrap else None
            if decision.note:
                op._profile_notes[candidate] = decision.note
                op.log.warning("GPU profile: %s", decision.note)
        if op._wrapper_forms[candidate] is None:
            return None
        recall(op, op._context)
        image = op.images[candidate]
        form = wrapper_forms.recorded(op.spot_run.profiler_forms, image)
        if (note := wrapper_forms.note(image, form)) is not None:
            op._profile_notes[candidate] = note
        return None if form == wrapper_forms.NONE else form

    def _wrapper_fallback(self, job: Mapping[str, Any]) -> bool:
        """Whether ``job`` failed to start because its image lacks the wrapper's own program (no
        ``/bin/sh`` in a distroless image, then no ``python3``): the next form is recorded for the image
        and kept for the task's later tries, for the job to be submitted again as it was, not as an
        interruption. The job's own command says which form it ran (a resumed worker process knows only
        the run's state)."""
        op = _operator(self)
        candidate = op.spot_run.placement.candidate
        program, command = spot_batch.missing_program(job), (job.get("container") or {}).get("command")
        form = wrapper_forms.form_of(command) if command else (op._wrapped and op._wrapper_form(candidate)) or None
        if not (op.gpu_profile and form and program) or not names_program(program, form):
            return False
        image = op.images[candidate]
        op.spot_run.profiler_forms[image] = wrapper_forms.next_form(form)
        remember(op, op._context)
        note = str(wrapper_forms.note(image, op.spot_run.profiler_forms[image]))
        op._profile_notes[candidate] = note
        op.log.warning("GPU profile: job %s could not start (%s); %s; submitting it again", job["jobId"], program, note)
        op.spot_run.resubmit_unchanged()
        return True

    def _check_queue_offers(self) -> None:
        """Skip candidates no queue can launch, and fail at once if none can: never RUNNABLE forever."""
        op = _operator(self)
        queues = sorted(set(op.queues.values()) or {str(op.job_queue)})
        try:
            offers = [op.gpu_hook.queue_offers(q) for q in queues]
        except Exception as error:  # a queue we may not describe is not a reason to refuse the job
            op.log.warning("Could not read the queues' instance types (%s); submitting as asked", error)
            return
        op._offers = {o.name: o for o in offers}
        refusal, warnings = check_offers(offers, op.candidates)
        for warning in warnings:
            op.log.warning(warning)
        if refusal:
            raise AirflowFailException(refusal)


class _QuietOnceOrphaned:
    """The operator's log while its try has a supervisor; ``orphaned_try.SILENT`` after (a line would fail on
    the dead supervisor's pipe, and the error would escape as the submission's own)."""

    def __init__(self, op: Any) -> None:
        self._op = op

    def __getattr__(self, name: str) -> Any:
        return getattr(orphaned_try.SILENT if orphaned_try.orphaned(self._op) else self._op.log, name)


def _identity(args: Mapping[str, Any]) -> dict[str, str]:
    """The task try's identity tags among SubmitJob's tags: a job found by its name must carry them."""
    return {k: v for k, v in (args.get("tags") or {}).items() if k.startswith("airflow-gpu/")}


def _operator(mixin: BatchSubmission) -> GPUBatchOperator:
    """The operator this mixin is part of (only ``GPUBatchOperator`` mixes it in)."""
    return cast("GPUBatchOperator", mixin)
