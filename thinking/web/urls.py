from __future__ import annotations

from django.urls import path

from thinking.web import page_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/", views.session_list, name="session-list"),
    path("sessions/new/", views.session_create, name="session-create"),
    path("sessions/estimate/", views.session_estimate, name="session-estimate"),
    path("sessions/<uuid:pk>/", views.session_detail, name="session-detail"),
    path("sessions/<uuid:pk>/thoughts/", page_views.session_thoughts, name="session-thoughts"),
    path("sessions/<uuid:pk>/followups/", views.session_followups, name="session-followups"),
    path("sessions/<uuid:pk>/sources/", page_views.session_sources, name="session-sources"),
    path(
        "sessions/<uuid:pk>/sub-questions/",
        page_views.session_sub_questions,
        name="session-sub-questions",
    ),
    path("sessions/<uuid:pk>/syntheses/", page_views.session_syntheses, name="session-syntheses"),
    path("sessions/<uuid:pk>/pause/", views.session_pause, name="session-pause"),
    path("sessions/<uuid:pk>/resume/", views.session_resume, name="session-resume"),
    path("sessions/<uuid:pk>/cancel/", views.session_cancel, name="session-cancel"),
    path("sessions/<uuid:pk>/conclude/", views.session_conclude, name="session-conclude"),
    path("sessions/<uuid:pk>/steer/", views.session_steer, name="session-steer"),
    path("sessions/<uuid:pk>/extend/", views.session_extend, name="session-extend"),
]
