"""The session as one JSON-ready document (the CLI's --json; later the API and exports).

Fields are only ever added, never renamed. Nothing server-private (worker lease, raw model
content) goes in.
"""

from __future__ import annotations

from typing import Any

from .models import ThinkingSession


def session_document(session: ThinkingSession) -> dict[str, Any]:
    return {
        "id": str(session.pk),
        "status": session.status,
        "completion_reason": session.completion_reason or None,
        "error": session.error_message or None,
        "question": session.question,
        "model": session.model_id,
        "thinking": {
            "mode": session.thinking_mode,
            "budget_tokens": session.thinking_budget,
            "effort": session.effort or None,
            "max_tokens": session.max_tokens,
            "token_ceiling": session.token_ceiling,
        },
        "format_mode": session.format_mode,
        "completion_note": session.completion_note or None,
        "parse_routes": session.parse_routes,
        "budget_seconds": session.budget_seconds,
        "active_seconds": round(session.active_seconds, 3),
        "created_at": session.created_at.isoformat(),
        "started_at": session.started_at.isoformat() if session.started_at else None,
        "finished_at": session.finished_at.isoformat() if session.finished_at else None,
        "thoughts": [
            {
                "sequence": t.sequence,
                "cycle": t.cycle,
                "type": t.type,
                "text": t.text,
                "confidence": t.confidence,
                "parts": t.parts,
                "reasoning": t.reasoning or None,
                "time_offset_seconds": t.time_offset_seconds,
                "sub_question": t.sub_question.text if t.sub_question else None,
            }
            for t in session.thoughts.select_related("sub_question")
        ],
        "sub_questions": [
            {
                "text": q.text,
                "priority": q.priority,
                "why": q.why,
                "explored": q.explored,
                "answer": q.answer or None,
                "parent": q.parent.text if q.parent else None,
            }
            for q in session.sub_questions.select_related("parent")
        ],
        "syntheses": [
            {
                "sequence": s.sequence,
                "text": s.text,
                "key_insights": s.key_insights,
                "confidence": s.confidence,
                "remaining_questions": s.remaining_questions,
                "time_offset_seconds": s.time_offset_seconds,
                "is_final": s.is_final,
                "reasoning": s.reasoning or None,
            }
            for s in session.syntheses.all()
        ],
        "final_answer": session.final_answer or None,
        "final_confidence": session.final_confidence,
        "confidence_evolution": session.confidence_evolution,
        "usage": {
            "input_tokens": session.input_tokens,
            "output_tokens": session.output_tokens,
            "cache_read_tokens": session.cache_read_tokens,
            "cache_write_tokens": session.cache_write_tokens,
            "estimated_cost_usd": session.estimated_cost,
        },
    }
